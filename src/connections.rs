//! The server's connections: accepted under a cap per client address and a cap in all, each given
//! a time to send its request headers, and every refusal and cut-off logged. A client that opens
//! connections and sends its headers slowly, or not at all, would otherwise hold the process's file
//! descriptors until legitimate requests could no longer be accepted.

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How many connections the server holds, and how long each may take to send its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a request's headers, the first request's or the
    /// next one's on a kept-alive connection; it is closed after that.
    pub header_timeout: Duration,
    /// Most connections open at once, all clients together. Kept below the process's file limit
    /// (often 1,024), so that the server never runs out of descriptors for the database.
    pub max_connections: usize,
    /// Most connections open at once from one client address.
    pub max_per_address: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self { header_timeout: Duration::from_secs(10), max_connections: 512, max_per_address: 64 }
    }
}

/// The answer a refused connection gets before it is closed: written without waiting, so a client
/// that reads nothing costs the server nothing.
const REFUSED_ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n\
Content-Type: application/problem+json\r\nContent-Length: 208\r\n\r\n\
{\"type\":\"urn:actionledger:problem:too_many_connections\",\"title\":\"Too many connections\",\"status\":503,\
\"detail\":\"the server holds as many connections as it takes, in all or from this address; try again shortly\"}";

/// The connections open now, in all and per client address.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Why a connection was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    InAll,
    FromAddress,
}

/// One accepted connection's place in the count, given back when it is dropped.
#[derive(Debug)]
struct Slot {
    open: Arc<Mutex<Open>>,
    address: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.by_address.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.by_address.remove(&self.address);
            }
        }
    }
}

fn take_slot(open: &Arc<Mutex<Open>>, address: IpAddr, limits: &ConnectionLimits) -> Result<Slot, (Refusal, usize)> {
    let mut counts = open.lock().unwrap_or_else(PoisonError::into_inner);
    if counts.total >= limits.max_connections {
        return Err((Refusal::InAll, counts.total));
    }
    let from_address = counts.by_address.get(&address).copied().unwrap_or(0);
    if from_address >= limits.max_per_address {
        return Err((Refusal::FromAddress, from_address));
    }
    counts.total += 1;
    *counts.by_address.entry(address).or_insert(0) += 1;
    Ok(Slot { open: Arc::clone(open), address })
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes; requests in flight
/// then finish before this returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let open = Arc::new(Mutex::new(Open::default()));
    // Every connection holds a receiver: dropping the sender tells them to finish, and the
    // sender's `closed` completes once the last of them has.
    let (stop, stopping) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or memory: waiting lets connections close before the next try.
                    tracing::warn!(%error, "cannot accept a connection; trying again in a second");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        match take_slot(&open, peer.ip(), &limits) {
            Ok(slot) => {
                tokio::spawn(connection(stream, peer, slot, router.clone(), limits, stopping.clone()));
            }
            Err((refusal, count)) => refuse(stream, peer, refusal, count, &limits),
        }
    }
    drop(stopping);
    drop(listener);
    // Idle connections close at once; those with a request in flight once it is answered.
    stop.send_replace(());
    stop.closed().await;
    Ok(())
}

fn refuse(stream: tokio::net::TcpStream, peer: SocketAddr, refusal: Refusal, count: usize, limits: &ConnectionLimits) {
    match refusal {
        Refusal::InAll => tracing::warn!(
            client = %peer,
            open = count,
            max_connections = limits.max_connections,
            "refused a connection from {peer}: the server holds its most connections ({count})"
        ),
        Refusal::FromAddress => tracing::warn!(
            client = %peer,
            open = count,
            max_per_address = limits.max_per_address,
            "refused a connection from {peer}: {count} connections are open from {}, the most one address may hold",
            peer.ip()
        ),
    }
    // Never waits, and lingers on nothing: a refused connection gives its descriptor back at once,
    // whether or not the client reads the answer (one that sent bytes may get a reset instead).
    let _ = stream.try_write(REFUSED_ANSWER);
    drop(stream);
}

/// Serves one connection until the client closes it, its headers are late, or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    slot: Slot,
    router: axum::Router,
    limits: ConnectionLimits,
    mut stopping: tokio::sync::watch::Receiver<()>,
) {
    let served = Arc::new(AtomicBool::new(false));
    let noted = Arc::clone(&served);
    let service = tower::ServiceExt::map_request(router, move |request: axum::http::Request<hyper::body::Incoming>| {
        noted.store(true, Ordering::Relaxed);
        let mut request = request.map(axum::body::Body::new);
        // The client's address, for the request's log line.
        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        request
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    let mut connection = std::pin::pin!(connection);
    let mut told_to_stop = false;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            _ = stopping.changed(), if !told_to_stop => {
                told_to_stop = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    };
    match result {
        Err(error) if error.is_timeout() && served.load(Ordering::Relaxed) => {
            // A kept-alive connection that asked nothing more: the ordinary end of one.
            tracing::debug!(client = %peer, "closed an idle connection");
        }
        Err(error) if error.is_timeout() => tracing::warn!(
            client = %peer,
            header_timeout = %crate::config::duration_text::format(limits.header_timeout),
            "closed a connection from {peer}: no complete request headers within {}",
            crate::config::duration_text::format(limits.header_timeout)
        ),
        Err(error) => tracing::debug!(client = %peer, %error, "a connection ended with an error"),
        Ok(()) => {}
    }
    drop(slot);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_per_address_and_in_all_and_given_back() {
        let limits = ConnectionLimits { max_connections: 3, max_per_address: 2, ..ConnectionLimits::default() };
        let open = Arc::new(Mutex::new(Open::default()));
        let one: IpAddr = "10.0.0.1".parse().unwrap();
        let two: IpAddr = "10.0.0.2".parse().unwrap();
        let first = take_slot(&open, one, &limits).unwrap();
        let _second = take_slot(&open, one, &limits).unwrap();
        assert_eq!(take_slot(&open, one, &limits).unwrap_err(), (Refusal::FromAddress, 2));
        let _third = take_slot(&open, two, &limits).unwrap();
        assert_eq!(take_slot(&open, two, &limits).unwrap_err(), (Refusal::InAll, 3));
        drop(first);
        assert!(take_slot(&open, one, &limits).is_ok(), "a closed connection gives its place back");
    }

    #[test]
    fn the_refused_answer_says_its_length() {
        let text = std::str::from_utf8(REFUSED_ANSWER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok(), "{body}");
    }
}
