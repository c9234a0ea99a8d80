//! The review console: a full-screen terminal UI over the shared ledger.
//!
//! Elm-shaped: [`model::update`] is pure and returns effects; a driver performs them off the
//! UI loop (database, destinations) and feeds the results back as messages; [`view::view`]
//! draws. A script of key events drives the same update, driver and view on a `TestBackend`
//! ([`ScriptedConsole`]), which is what `review --script` and the tests do; only the terminal's
//! own loop ([`event_loop`]) suspends on Ctrl-Z.
//!
//! Dependencies point one way, each module importing only those before it:
//! [`safe_text`], [`clipboard`] and [`layout`] (the screen's geometry) stand alone; [`keys`]
//! (the bindings); [`model`]: `state` <- `effect` <- `load` <- `dialog` <- `update`;
//! [`view`] reads the model and the layout; this driver, last, joins them. The update never
//! asks the view: the driver has the view measure how far things scroll
//! ([`layout::ScrollLimits`]) before each key, and the update bounds scrolling by that.

pub mod clipboard;
pub mod keys;
pub mod layout;
pub mod model;
pub mod safe_text;
pub mod view;

use crate::destination::Destinations;
use crate::domain::{Person, State, WayOut};
use crate::error::{Error, Kind};
use crate::ledger::{Ledger, ManualOutcome, ManualRequest};
use crate::reconcile;
use crate::store::{ListFilter, PageStart, Store};
use model::{
    Counts, Done, Effect, Failure, FilterTerms, LoadRequest, MarkedSet, Model, Msg, NOT_WRITTEN_ANSWER,
    OLD_WORKER_STOPPED_ANSWER, Pane, Rows, Snapshot, Window,
};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::Event;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use view::Theme;

/// How the console runs.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    pub owner: Person,
    /// Shown in the header, password already hidden.
    pub ledger_label: String,
    /// Destinations from `--config`, for lookups, takeover safety and retention windows.
    pub destinations: Destinations,
    /// How often the console refreshes by itself.
    pub refresh: Duration,
    /// A one-line hint shown until the first key.
    pub hint: Option<String>,
    /// A filter line the console opens with, as if typed (`mine`: what is assigned to the owner).
    pub filter: Option<String>,
}

/// Performs effects in background tasks; each sends back exactly one [`Done`].
struct Driver<S> {
    /// The ledger, deciding with the capabilities of the console's destinations.
    ledger: Ledger<S>,
    destinations: Arc<Destinations>,
    results: mpsc::UnboundedSender<Done>,
    outstanding: usize,
    /// How long a read waits for the ledger before the console says it cannot be reached.
    bound: Arc<ReadBound>,
    /// Where copies go: the real terminal gets the clipboard escape; a scripted session keeps
    /// what was copied, to be read back.
    clipboard: Clipboard,
}

enum Clipboard {
    Terminal,
    Kept(Vec<String>),
}

impl<S: Store> Driver<S> {
    fn perform(&mut self, effect: Effect) {
        let effect = match effect {
            Effect::Copy(text) => {
                match &mut self.clipboard {
                    Clipboard::Terminal => {
                        use std::io::Write as _;
                        let mut out = std::io::stdout();
                        let _ = out.write_all(clipboard::osc52(&text).as_bytes()).and_then(|()| out.flush());
                    }
                    Clipboard::Kept(copied) => copied.push(text),
                }
                return;
            }
            // The terminal's event loop suspends itself; a scripted session has no terminal to
            // give back, and carries on.
            Effect::Suspend => return,
            effect => effect,
        };
        self.outstanding += 1;
        let ledger = self.ledger.clone();
        let destinations = Arc::clone(&self.destinations);
        let results = self.results.clone();
        let bound = Arc::clone(&self.bound);
        tokio::spawn(async move {
            let done = execute(&ledger, &destinations, &bound, effect).await;
            let _ = results.send(done);
        });
    }
}

/// The least a read waits for the ledger: a person is told within about this long that it went
/// away, rather than after the pool's own wait.
const READ_BOUND_AT_LEAST: Duration = Duration::from_secs(2);

/// The most a read waits for the ledger, however slow it has been.
const READ_BOUND_AT_MOST: Duration = Duration::from_secs(30);

/// How long the console waits for one read (the rows, an action's detail) before it says that
/// the ledger cannot be reached: at least [`READ_BOUND_AT_LEAST`], and four times the slowest read
/// seen, so that a ledger that is slow but answering is not taken for one that is away; after each
/// read that ran out of time, twice as long for the next (up to [`READ_BOUND_AT_MOST`]), so that a
/// ledger slower than the bound is still read. Commands are never bounded: one cut short might
/// still commit.
#[derive(Debug, Default)]
struct ReadBound {
    slowest_ms: std::sync::atomic::AtomicU64,
    overruns: std::sync::atomic::AtomicU32,
}

impl ReadBound {
    fn current(&self) -> Duration {
        use std::sync::atomic::Ordering::Relaxed;
        let slowest = Duration::from_millis(self.slowest_ms.load(Relaxed)).saturating_mul(4);
        let doubled = 1u32 << self.overruns.load(Relaxed).min(5);
        READ_BOUND_AT_LEAST.max(slowest).saturating_mul(doubled).min(READ_BOUND_AT_MOST)
    }

    /// Runs a read within the bound: its result, or how long it waited in vain.
    async fn read<T>(&self, read: impl Future<Output = Result<T, Error>>) -> Result<Result<T, Error>, Duration> {
        use std::sync::atomic::Ordering::Relaxed;
        let (bound, started) = (self.current(), tokio::time::Instant::now());
        let Ok(result) = tokio::time::timeout(bound, read).await else {
            self.overruns.fetch_add(1, Relaxed);
            return Err(bound);
        };
        if result.is_ok() {
            let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.slowest_ms.fetch_max(took, Relaxed);
            self.overruns.store(0, Relaxed);
        }
        Ok(result)
    }
}

/// A read that got no answer within `bound`, in words.
fn not_reached(bound: Duration) -> String {
    format!("no answer from the ledger within {}s", bound.as_secs())
}

async fn execute<S: Store>(ledger: &Ledger<S>, destinations: &Destinations, bound: &ReadBound, effect: Effect) -> Done {
    match effect {
        Effect::Load(request) => match bound.read(load(ledger, &request)).await {
            Ok(Err(error)) if error.is_unreachable() => Done::Unreachable { request, message: error.to_string() },
            Ok(result) => Done::Loaded { request, result: result.map_err(failure) },
            Err(waited) => Done::Unreachable { request, message: not_reached(waited) },
        },
        Effect::LoadDetail { id, key } => {
            let read = async { ledger.detail(&key).await.map(Box::new).map_err(Error::from) };
            let result = match bound.read(read).await {
                Ok(result) => result.map_err(failure),
                Err(waited) => Err(Failure::new(Kind::Error, not_reached(waited))),
            };
            Done::DetailLoaded { id, result }
        }
        Effect::LoadFacts { id, command, actions } => {
            Done::FactsLoaded { id, result: ledger.decision_facts(&actions, &command).await.map_err(failure) }
        }
        Effect::Run(request) => {
            Done::Command(ledger.manual(&request).await.map(|o| outcome_text(&request, &o)).map_err(failure))
        }
        Effect::RunEach(requests) => {
            let verb = requests.first().map_or("", |r| r.command.verb());
            let answers = ledger.manual_each(&requests, false).await;
            let results = requests
                .iter()
                .zip(answers)
                .map(|(request, answer)| {
                    let text = answer.map(|o| change_text(&o)).map_err(failure);
                    (request.key.to_string(), text)
                })
                .collect();
            Done::Each { verb, results }
        }
        Effect::MarkAll(request) => {
            let result = mark_all(ledger, &request).await.map_err(failure);
            Done::Marked { request, result }
        }
        // Performed by the driver itself, never in a task.
        Effect::Copy(_) | Effect::Suspend => Done::Copied,
        Effect::Lookup { key, revision, person, reason } => {
            let looked =
                reconcile::look_up_for_person(ledger, destinations, &key, Some(revision), &person, &reason).await;
            Done::Command(looked.map(|(action, looked)| looked.describe(&action)).map_err(failure))
        }
    }
}

/// The one place an error becomes a result the model reads: it keeps the kind its exit code
/// gives it, so that the console calls only a refusal a refusal.
fn failure(error: impl Into<Error>) -> Failure {
    let error = error.into();
    let message = match error.refusal() {
        Some(refusal) => match refusal.way_out() {
            Some(way_out) => format!("{refusal}; {}", way_out_words(way_out)),
            None => refusal.to_string(),
        },
        None => error.to_string(),
    };
    Failure::new(error.kind(), message)
}

/// A refusal's way out in the console's terms: the keys to press, the answer to type.
fn way_out_words(way_out: WayOut) -> String {
    use keys::{Action, CommandKind, action_key, command_key};
    match way_out {
        WayOut::NameProposal => format!(
            "press {} to show each proposal waiting; {} and {} act on the one shown",
            action_key(Action::NextProposal),
            command_key(CommandKind::Approve),
            command_key(CommandKind::Reject)
        ),
        WayOut::ReadAgain => "look at it again as it is now, and decide again".to_owned(),
        WayOut::ConfirmOldWorkerStopped => {
            format!("run the command again and type {OLD_WORKER_STOPPED_ANSWER:?} when asked whether it has stopped")
        }
        WayOut::ConfirmNotWritten => format!(
            "check the destination; if it holds no record, run the retry again and type {NOT_WRITTEN_ANSWER:?} when \
             asked"
        ),
        WayOut::SeeLateResults => {
            "its attempts in the detail list its late results and who acknowledged them".to_owned()
        }
    }
}

/// One action's change in a bulk result, which names the command and the person once.
fn change_text(outcome: &ManualOutcome) -> String {
    let a = &outcome.action;
    match outcome.transition {
        Some(t) => format!("{} -> {} (version {})", t.from, t.to, a.revision),
        None => format!("stays {} (version {})", a.state, a.revision),
    }
}

/// What `*` marks: the first actions of the pane that match the filter, one more read to know
/// whether more match, and then how many do.
async fn mark_all<S: Store>(ledger: &Ledger<S>, request: &LoadRequest) -> Result<MarkedSet, Error> {
    let limit = request.limit;
    let probe = LoadRequest { limit: limit.saturating_add(1), ..request.clone() };
    let Snapshot { rows: Rows::Actions(mut actions), now, .. } = load(ledger, &probe).await? else {
        return Ok(MarkedSet { actions: Vec::new(), capped: false, total: None });
    };
    let capped = i64::try_from(actions.len()).unwrap_or(i64::MAX) > limit;
    actions.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let total = if capped {
        let counts = match matching(request, now) {
            Some(filter) => ledger.counts_matching(&filter).await?,
            None => ledger.counts().await?,
        };
        match request.pane {
            // The conflict pane also lists proposals on actions in other states; late results
            // are not a state: no one count says these.
            Pane::Conflict | Pane::LateResults | Pane::Refused => None,
            Pane::All => Some(counts.iter().map(|(_, n)| n).sum()),
            pane => pane.state().map(|state| counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n)),
        }
    } else {
        None
    };
    Ok(MarkedSet { actions, capped, total })
}

/// The filter's terms as the store takes them, the same for the rows and the counts.
fn matching(request: &LoadRequest, now: crate::domain::Timestamp) -> Option<ListFilter> {
    request.filter.as_ref().map(|terms| ListFilter {
        key_contains: terms.key_contains.clone(),
        destination: terms.destination.clone(),
        owner: terms.assignee.clone(),
        updated_before: terms
            .older_than
            .map(|age| now - chrono::Duration::from_std(age).unwrap_or(chrono::TimeDelta::MAX)),
        ..ListFilter::default()
    })
}

fn outcome_text(request: &ManualRequest, outcome: &ManualOutcome) -> String {
    let verb = request.command.verb();
    let a = &outcome.action;
    match outcome.transition {
        Some(t) => {
            format!("{verb} {}: {} -> {} (version {}), by {}", a.key, t.from, t.to, a.revision, request.person.as_str())
        }
        None => format!("{verb} {}: stays {} (version {}), by {}", a.key, a.state, a.revision, request.person.as_str()),
    }
}

async fn load<S: Store>(ledger: &Ledger<S>, request: &LoadRequest) -> Result<Snapshot, Error> {
    let store = ledger.store();
    let (before_id, after_id) = match request.window {
        Window::Newest | Window::Oldest => (None, None),
        Window::Before(id) | Window::From(id) => (Some(id), None),
        Window::After(id) => (None, Some(id)),
    };
    // The end of the list in the order shown, and the window that starts at a row.
    let start = match request.window {
        Window::Oldest => PageStart::Last,
        Window::From(_) => PageStart::AtCursor,
        _ => PageStart::AfterCursor,
    };
    let now = store.now().await?;
    // The filter's terms, the same for the rows and for the counts that follow the filter.
    let matching = matching(request, now);
    let rows = match request.pane.state() {
        // Refused submissions are always newest first, so the window from a row is the one
        // before the next newer id.
        None if request.pane == Pane::Refused => {
            let before_id = before_id.map(|id| if start == PageStart::AtCursor { id + 1 } else { id });
            let page = ListFilter { before_id, limit: request.limit, ..matching.clone().unwrap_or_default() };
            Rows::Refused(ledger.list_refused_matching(&page).await?)
        }
        state => Rows::Actions(
            ledger
                .list(&ListFilter {
                    state,
                    // A proposed payload waits for a decision in the conflict pane, whatever the
                    // state of its action (a completed action's new version, for one).
                    or_proposed: state == Some(State::Conflict),
                    late_results: request.pane == Pane::LateResults,
                    before_id,
                    after_id,
                    limit: request.limit,
                    order: request.order,
                    start,
                    ..matching.clone().unwrap_or_default()
                })
                .await?,
        ),
    };
    let blocked = match &rows {
        Rows::Actions(actions) => ledger.blocked_among(actions).await?,
        Rows::Refused(_) => std::collections::BTreeMap::new(),
    };
    // Every count follows the filter: a tab never counts what its pane would not list.
    let counts = match (request.with_counts, &matching) {
        (false, _) => None,
        (true, Some(filter)) => {
            let notices = store.count_notices_matching(filter, now).await?;
            Some(Counts {
                by_state: ledger.counts_matching(filter).await?,
                refused: store.count_refused(filter).await?,
                stale_claims: notices.stale_claims,
                proposed_elsewhere: notices.proposed_elsewhere,
                late_results: notices.late_results,
            })
        }
        // Without a filter, each count is read through its own index.
        (true, None) => Some(Counts {
            by_state: ledger.counts().await?,
            refused: store.count_refused(&ListFilter::default()).await?,
            stale_claims: store.count_stale_claims().await?,
            proposed_elsewhere: store.count_proposed_elsewhere().await?,
            late_results: store.count_late_results().await?,
        }),
    };
    Ok(Snapshot { counts, now, rows, blocked })
}

fn new_model(options: &ConsoleOptions, width: u16, height: u16) -> Model {
    let mut model = Model::new(&options.ledger_label, options.owner.clone(), width, height);
    model.hint.clone_from(&options.hint);
    model.filter = options.filter.as_deref().and_then(|line| FilterTerms::parse(line, &options.owner).ok());
    model.retention = options
        .destinations
        .all()
        .filter_map(|d| d.config.idempotency.as_ref().map(|i| (d.name.clone(), i.retention)))
        .collect();
    model.configured = options.destinations.all().map(|d| d.name.clone()).collect();
    model.destinations = options.destinations.catalog();
    model.id_pointers = options
        .destinations
        .all()
        .filter_map(|d| d.config.create.as_ref().map(|c| (d.name.clone(), c.id_pointer.clone())))
        .collect();
    model
}

fn driver<S: Store>(ledger: &Ledger<S>, options: &ConsoleOptions) -> (Driver<S>, mpsc::UnboundedReceiver<Done>) {
    let (results, receiver) = mpsc::unbounded_channel();
    let driver = Driver {
        ledger: ledger.clone().with_destinations(options.destinations.catalog()),
        destinations: Arc::new(options.destinations.clone()),
        results,
        outstanding: 0,
        bound: Arc::new(ReadBound::default()),
        clipboard: Clipboard::Kept(Vec::new()),
    };
    (driver, receiver)
}

/// Runs the console on the real terminal until the person quits. The terminal is restored on
/// quit, on error and on panic.
pub async fn run_terminal<S: Store>(ledger: &Ledger<S>, options: &ConsoleOptions) -> Result<(), Error> {
    use ratatui::crossterm::{event, execute};
    use std::io::IsTerminal as _;
    // Without a terminal (cron, `ssh` without `-t`, a redirect) nothing is set up, so nothing is
    // written that would have to be undone.
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(Error::Invalid(
            "the review console needs a terminal on standard input and output: over ssh use `ssh -t`, or run it \
             headless with --script FILE --size WIDTHxHEIGHT"
                .to_owned(),
        ));
    }
    let mut terminal = ratatui::try_init().map_err(|e| {
        ratatui::restore();
        Error::io("cannot set up the terminal", e)
    })?;
    let _ = execute!(std::io::stdout(), event::EnableBracketedPaste);
    // ratatui's hook restores the screen; bracketed paste is ours to undo, on panic too.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = execute!(std::io::stdout(), event::DisableBracketedPaste);
        previous(info);
    }));
    let (sender, mut events) = mpsc::channel(64);
    std::thread::spawn(move || read_terminal_events(&sender));
    let size = terminal.size().unwrap_or_default();
    let mut model = new_model(options, size.width, size.height);
    // A service manager's SIGTERM, a dropped SSH link's SIGHUP or a `kill -INT` ends the console
    // as `q` does: the terminal is given back as it was found, never left in raw mode on the
    // alternate screen. What was in flight is the ledger's own transaction: whole or not at all.
    let result = tokio::select! {
        result = event_loop(&mut terminal, &mut model, ledger, options, &mut events) => result,
        signal = termination_signal() => {
            tracing::info!("review console stopped by {signal}");
            Ok(())
        }
    };
    let _ = execute!(std::io::stdout(), event::DisableBracketedPaste);
    ratatui::restore();
    result
}

/// Completes with the name of the first of SIGTERM, SIGHUP and SIGINT to arrive; never, for one
/// that cannot be listened for.
async fn termination_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind| signal(kind).ok();
    let (mut term, mut hangup, mut interrupt) =
        (listen(SignalKind::terminate()), listen(SignalKind::hangup()), listen(SignalKind::interrupt()));
    tokio::select! {
        () = next_signal(term.as_mut()) => "SIGTERM",
        () = next_signal(hangup.as_mut()) => "SIGHUP",
        () = next_signal(interrupt.as_mut()) => "SIGINT",
    }
}

async fn next_signal(stream: Option<&mut tokio::signal::unix::Signal>) {
    match stream {
        Some(stream) => {
            stream.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Forwards terminal events until the console stops listening.
fn read_terminal_events(sender: &mpsc::Sender<Event>) {
    use ratatui::crossterm::event;
    loop {
        match event::poll(Duration::from_millis(100)) {
            Ok(true) => match event::read() {
                Ok(ev) => {
                    if sender.blocking_send(ev).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            },
            Ok(false) if sender.is_closed() => return,
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

fn to_msg(event: Event) -> Option<Msg> {
    match event {
        Event::Key(key) => Some(Msg::Key(key)),
        Event::Paste(text) => Some(Msg::Paste(text)),
        Event::Resize(width, height) => Some(Msg::Resize(width, height)),
        _ => None,
    }
}

/// Applies one message. Before a key, the view measures how far what is open scrolls on this
/// screen, which the update bounds scrolling by: so the update itself never asks the view.
fn apply(model: &mut Model, msg: Msg) -> Vec<Effect> {
    if let Msg::Key(_) = msg {
        model.scroll_limits = view::scroll_limits(model);
    }
    // This host's clock, not the database's: it must run while the database is away.
    model.clock = Some(chrono::Utc::now());
    model::update(model, msg)
}

/// The console's main loop on the terminal, over any event source.
pub async fn event_loop<S: Store>(
    terminal: &mut ratatui::DefaultTerminal,
    model: &mut Model,
    ledger: &Ledger<S>,
    options: &ConsoleOptions,
    events: &mut mpsc::Receiver<Event>,
) -> Result<(), Error> {
    let theme = Theme::from_environment();
    let (mut driver, mut results) = driver(ledger, options);
    driver.clipboard = Clipboard::Terminal;
    let mut changes = ledger.store().listen_for_changes().await.ok().flatten();
    let mut ticker = tokio::time::interval(options.refresh);
    // After a suspension (or a stalled machine) one refresh, not one per tick missed.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // While the ledger is away it is asked every second, however long the refresh: it is seen
    // back at once.
    let mut probe = tokio::time::interval(PROBE_WHILE_AWAY);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for effect in model.start() {
        driver.perform(effect);
    }
    loop {
        terminal
            .draw(|frame| view::view(model, theme, frame))
            .map_err(|e| Error::io("cannot draw on the terminal", e))?;
        let msg = tokio::select! {
            event = events.recv() => match event {
                Some(event) => match to_msg(event) { Some(msg) => msg, None => continue },
                None => break,
            },
            Some(done) = results.recv() => {
                driver.outstanding -= 1;
                Msg::Done(done)
            }
            _ = ticker.tick() => Msg::Tick,
            _ = probe.tick(), if model.connection.away.is_some() => Msg::Tick,
            Some(()) = async { match changes.as_mut() { Some(c) => c.recv().await, None => std::future::pending().await } } => Msg::Changed,
        };
        let mut effects = apply(model, msg);
        while !effects.is_empty() {
            let mut resumed = Vec::new();
            for effect in effects {
                if effect == Effect::Suspend {
                    let (width, height) = suspend(terminal)?;
                    // The terminal may have been resized meanwhile, and the ledger moved on.
                    resumed.extend(apply(model, Msg::Resize(width, height)));
                    resumed.extend(apply(model, Msg::Tick));
                } else {
                    driver.perform(effect);
                }
            }
            effects = resumed;
        }
        if model.quit {
            break;
        }
    }
    Ok(())
}

/// How often the ledger is asked while it cannot be reached.
const PROBE_WHILE_AWAY: Duration = Duration::from_secs(1);

/// Ctrl-Z: gives the terminal back as the shell had it (no raw mode, no alternate screen, no
/// bracketed paste, the cursor shown) and stops, as a shell's job stops; once `fg` continues it,
/// takes the terminal again and has the next draw paint every cell, so nothing the shell wrote
/// stays on screen. Answers the terminal's size, which may have changed meanwhile.
fn suspend(terminal: &mut ratatui::DefaultTerminal) -> Result<(u16, u16), Error> {
    use ratatui::crossterm::{cursor, event, execute, terminal as screen};
    let mut out = std::io::stdout();
    let _ = execute!(out, event::DisableBracketedPaste, screen::LeaveAlternateScreen, cursor::Show);
    let _ = screen::disable_raw_mode();
    // The whole process group stops, as the shell stops a job: a script or wrapper that started
    // the console stops with it, so the shell, which waits for that job, gets the terminal back.
    // While stopped no thread of the console runs, so every key typed at the shell goes to it.
    rustix::process::kill_current_process_group(rustix::process::Signal::TSTP)
        .map_err(|e| Error::io("cannot suspend the console", e.into()))?;
    let taken = |e| Error::io("cannot take the terminal again after fg", e);
    screen::enable_raw_mode().map_err(taken)?;
    execute!(out, screen::EnterAlternateScreen, event::EnableBracketedPaste, cursor::Hide).map_err(taken)?;
    // `resize` clears the whole screen and forgets what was drawn, without asking the terminal
    // where its cursor is (`Terminal::clear` does, and the answer would be read by the thread
    // reading keys).
    let size = terminal.size().map_err(taken)?;
    terminal.resize(ratatui::layout::Rect::new(0, 0, size.width, size.height)).map_err(taken)?;
    Ok((size.width, size.height))
}

/// A console without a terminal, driven key by key: what `review --script` and the tests use.
/// Each key is applied and every effect it triggered is awaited before the next.
pub struct ScriptedConsole<S> {
    model: Model,
    driver: Driver<S>,
    results: mpsc::UnboundedReceiver<Done>,
    terminal: Terminal<TestBackend>,
}

impl<S> std::fmt::Debug for ScriptedConsole<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedConsole").field("model", &self.model).finish_non_exhaustive()
    }
}

impl<S: Store> ScriptedConsole<S> {
    /// Opens the console at `width` x `height` and waits for its first screen of data.
    pub async fn start(ledger: &Ledger<S>, options: &ConsoleOptions, width: u16, height: u16) -> Result<Self, Error> {
        let terminal = match Terminal::new(TestBackend::new(width, height)) {
            Ok(terminal) => terminal,
            Err(never) => match never {},
        };
        let mut model = new_model(options, width, height);
        let (mut driver, mut results) = driver(ledger, options);
        let effects = model.start();
        settle(&mut model, &mut driver, &mut results, effects).await?;
        Ok(Self { model, driver, results, terminal })
    }

    /// Applies one line of a script: literal text with `<Key>` for named keys.
    pub async fn press(&mut self, line: &str) -> Result<(), Error> {
        self.press_keys(&keys::parse_script_line(line)?).await
    }

    async fn press_keys(&mut self, keys: &[ratatui::crossterm::event::KeyEvent]) -> Result<(), Error> {
        for key in keys {
            self.send(Msg::Key(*key)).await?;
        }
        Ok(())
    }

    /// Applies any message (a paste, a refresh) and waits for what it triggered.
    pub async fn send(&mut self, msg: Msg) -> Result<(), Error> {
        if self.model.quit {
            return Ok(());
        }
        let effects = apply(&mut self.model, msg);
        settle(&mut self.model, &mut self.driver, &mut self.results, effects).await
    }

    /// What the session copied to the clipboard (`y`), in order.
    pub fn copied(&self) -> &[String] {
        match &self.driver.clipboard {
            Clipboard::Kept(copied) => copied,
            Clipboard::Terminal => &[],
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The screen as plain text, one line per row.
    pub fn screen(&mut self) -> Result<String, Error> {
        self.render(Theme::PLAIN)?;
        Ok(screen_text(self.terminal.backend()))
    }

    /// Draws the screen and returns its cells, with styles.
    pub fn render(&mut self, theme: Theme) -> Result<ratatui::buffer::Buffer, Error> {
        let model = &self.model;
        match self.terminal.draw(|frame| view::view(model, theme, frame)) {
            Ok(_) => {}
            Err(never) => match never {},
        }
        Ok(self.terminal.backend().buffer().clone())
    }
}

/// How a scripted session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptReport {
    /// The final screen as plain text.
    pub screen: String,
    /// The line whose command did not run (refused, or failed), and why: the script stopped there.
    pub stopped: Option<ScriptStop>,
    /// The dialog the script left open, as a sentence (a tester may want that screen).
    pub open_dialog: Option<String>,
}

/// A scripted command that did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptStop {
    pub line: usize,
    pub text: String,
    /// Refused, or failed otherwise: the session's exit code follows it.
    pub kind: Kind,
    /// The status line's message, in full.
    pub message: String,
}

/// Runs a whole script: parsed in full first, so a bad line runs nothing; then line by line,
/// stopping at the first line whose command did not run.
pub async fn run_script<S: Store>(
    ledger: &Ledger<S>,
    options: &ConsoleOptions,
    script: &str,
    width: u16,
    height: u16,
) -> Result<ScriptReport, Error> {
    let lines = keys::parse_script(script)?;
    let mut console = ScriptedConsole::start(ledger, options, width, height).await?;
    let mut stopped = None;
    let did_not_run = |model: &Model| model.refusals + model.failures;
    let mut quit_at = None;
    for line in lines {
        // Keys after the console quit would be dropped: the script stops there and says so,
        // rather than seem to have run them.
        if let Some(quit_line) = quit_at {
            let message = format!(
                "the console quit at line {quit_line} (q), so this line and those after it were not run; end the \
                 script with q, or remove it"
            );
            stopped = Some(ScriptStop { line: line.number, text: line.text, kind: Kind::Usage, message });
            break;
        }
        let before = did_not_run(&console.model);
        for (at, key) in line.keys.iter().enumerate() {
            if console.model.quit {
                let message = format!(
                    "the console quit (q) before the {} key(s) after it on this line; they were not pressed",
                    line.keys.len() - at
                );
                stopped = Some(ScriptStop { line: line.number, text: line.text.clone(), kind: Kind::Usage, message });
                break;
            }
            console.send(Msg::Key(*key)).await?;
        }
        if stopped.is_some() {
            break;
        }
        if console.model.quit {
            quit_at = Some(line.number);
        }
        if did_not_run(&console.model) > before {
            let message = console.model.status.as_ref().map(|s| s.text.to_string()).unwrap_or_default();
            let kind = console.model.stopped.unwrap_or(Kind::Refused);
            stopped = Some(ScriptStop { line: line.number, text: line.text, kind, message });
            break;
        }
    }
    let open_dialog = console.model.open_dialog();
    Ok(ScriptReport { screen: console.screen()?, stopped, open_dialog })
}

/// Performs effects and every effect their results trigger, until nothing is outstanding.
async fn settle<S: Store>(
    model: &mut Model,
    driver: &mut Driver<S>,
    results: &mut mpsc::UnboundedReceiver<Done>,
    effects: Vec<Effect>,
) -> Result<(), Error> {
    for effect in effects {
        driver.perform(effect);
    }
    while driver.outstanding > 0 {
        let done = tokio::time::timeout(Duration::from_mins(1), results.recv())
            .await
            .map_err(|_| {
                Error::io(
                    "the console waited 60s for the ledger",
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "giving up"),
                )
            })?
            .ok_or_else(|| {
                Error::io(
                    "the console's worker tasks stopped",
                    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "no result will come"),
                )
            })?;
        driver.outstanding -= 1;
        for effect in apply(model, Msg::Done(done)) {
            driver.perform(effect);
        }
    }
    Ok(())
}

/// The screen as plain text, one line per row, trailing spaces trimmed.
pub fn screen_text(backend: &TestBackend) -> String {
    let buffer = backend.buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let line: String = (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
