//! `sim-crm`: a simulated CRM over HTTP, for demos and tests.

use super::worker::shutdown_signal;
use crate::error::{Error, exit};
use clap::Args;

#[derive(Debug, Args)]
#[allow(clippy::struct_excessive_bools, reason = "each flag is one independent switch of the simulation")]
pub struct SimCrmArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: std::net::SocketAddr,
    /// How long idempotency keys are remembered.
    #[arg(long, default_value = "24h", value_parser = crate::config::duration_text::parse)]
    retention: std::time::Duration,
    /// Ignore idempotency keys (a destination without that protection).
    #[arg(long)]
    no_idempotency: bool,
    /// Allow several records with the same external reference.
    #[arg(long)]
    no_unique_refs: bool,
    /// Accept writes from obsolete ownership versions.
    #[arg(long)]
    accept_obsolete: bool,
    /// A fault and its probability per create request, e.g. drop-after-commit=0.3 (repeatable).
    /// Faults: delay[:2s], 503, 429[:SECONDS], close-before-write, drop-after-commit, 500-after-write,
    /// 500-before-write.
    #[arg(long = "fault", value_parser = crate::sim_crm::FaultPlan::parse_rate)]
    faults: Vec<(crate::sim_crm::Fault, f64)>,
    /// Faults for the first create requests, in order, e.g. "503,drop-after-commit,ok".
    #[arg(long)]
    fault_script: Option<String>,
    /// Keep state in this file across restarts (default: memory only).
    #[arg(long)]
    state: Option<std::path::PathBuf>,
    /// The destination name used in the printed configuration.
    #[arg(long, default_value = "crm")]
    name: String,
    /// Print the destination block for actionledger.toml and exit.
    #[arg(long)]
    print_config: bool,
}

pub(super) async fn sim_crm(args: SimCrmArgs) -> Result<i32, Error> {
    let script = match &args.fault_script {
        Some(text) => text
            .split(',')
            .filter(|f| !f.trim().is_empty())
            .map(str::parse)
            .collect::<Result<_, crate::sim_crm::FaultError>>()
            .map_err(|e| Error::Invalid(e.to_string()))?,
        None => std::collections::VecDeque::new(),
    };
    let total: f64 = args.faults.iter().map(|(_, p)| p).sum();
    if total > 1.0 {
        return Err(Error::Invalid(format!("the fault probabilities add up to {total}, more than 1")));
    }
    let options = crate::sim_crm::Options {
        retention: (!args.no_idempotency).then_some(args.retention),
        unique_refs: !args.no_unique_refs,
        reject_obsolete: !args.accept_obsolete,
        state_file: args.state,
        faults: crate::sim_crm::FaultPlan { script, rates: args.faults },
    };
    crate::domain::input::validate_destination_name(&args.name)?;
    if args.print_config {
        print!("{}", crate::sim_crm::destination_config(&args.name, args.listen, &options));
        return Ok(exit::OK);
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Error::io(format!("cannot listen on {}", args.listen), e))?;
    let crm = crate::sim_crm::SimCrm::start(listener, options)?;
    println!("# paste into actionledger.toml:\n{}", crm.destination_config(&args.name));
    eprintln!("sim-crm listening on http://{} (GET /stats for what it did); Ctrl-C stops it", crm.addr());
    shutdown_signal().await;
    eprintln!("{}", serde_json::to_string(&crm.stats()).expect("stats serialize"));
    Ok(exit::OK)
}
