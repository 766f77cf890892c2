//! The kube-proxy stand-in: every Service with a ClusterIP and a selector gets a loopback address
//! of its own (`addresses`, `127.11.x.y`) where a forwarder listens on each Service port and
//! relays each TCP connection to one of the Service's ready endpoints (round robin over the pods
//! the selector picks, at the port's `targetPort`, by number or container port name). A
//! connection while there is no ready endpoint is closed at once, as a real cluster refuses it.
//! The Service's own `spec.clusterIP` (`10.96.x.y`, what `kubectl get svc` shows) is unchanged;
//! names resolve to the forwarder (`hosts`).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sim::kubelet::addresses::{self, Lease, Range};
use crate::sim::kubelet::endpoints;
use crate::sim::kubelet::probes::resolve_port;
use crate::sim::state::State;

type Targets = Arc<RwLock<Vec<SocketAddr>>>;

struct ServiceProxy {
    lease: Lease,
    ports: HashMap<u16, Targets>,
    stop: CancellationToken,
}

/// Every Service's forwarder, by Service uid.
pub struct Proxies {
    services: HashMap<String, ServiceProxy>,
    shutdown: CancellationToken,
}

impl Proxies {
    /// No forwarders yet; all of them stop at `shutdown`.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self { services: HashMap::new(), shutdown }
    }

    /// Starts, updates and stops forwarders to match the Services and pods; each Service's
    /// forwarder address by Service uid.
    pub fn sync(&mut self, state: &State, pods: &[Value]) -> HashMap<String, Ipv4Addr> {
        let mut wanted = HashMap::new();
        for svc in state.store.list("services", None) {
            let clustered = svc["spec"]["clusterIP"].as_str().is_some_and(|ip| ip != "None")
                && svc["spec"]["selector"].as_object().is_some_and(|s| !s.is_empty());
            if !clustered {
                continue;
            }
            let uid = svc["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
            if !self.services.contains_key(&uid) {
                match addresses::allocate(Range::Services) {
                    Ok(lease) => {
                        let stop = self.shutdown.child_token();
                        self.services
                            .insert(uid.clone(), ServiceProxy { lease, ports: HashMap::new(), stop });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "no Service address left");
                        continue;
                    }
                }
            }
            let Some(proxy) = self.services.get_mut(&uid) else { continue };
            for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
                let Some(number) = port["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
                    continue;
                };
                let target = if port["targetPort"].is_null() { &port["port"] } else { &port["targetPort"] };
                let addrs: Vec<SocketAddr> = endpoints(svc, pods)
                    .filter_map(|(pod, ip)| {
                        let containers = pod["spec"]["containers"].as_array()?;
                        let port = containers.iter().find_map(|c| resolve_port(target, c))?;
                        Some(SocketAddr::from((ip, port)))
                    })
                    .collect();
                let targets = match proxy.ports.get(&number) {
                    Some(t) => t.clone(),
                    None => {
                        let t: Targets = Arc::default();
                        let addr = SocketAddr::from((proxy.lease.ip, number));
                        if let Err(e) = listen(addr, t.clone(), proxy.stop.clone()) {
                            tracing::warn!(%addr, error = %e, "could not start a Service forwarder");
                            continue;
                        }
                        proxy.ports.insert(number, t.clone());
                        t
                    }
                };
                if *targets.read() != addrs {
                    *targets.write() = addrs;
                }
            }
            wanted.insert(uid, proxy.lease.ip);
        }
        self.services.retain(|uid, proxy| {
            let keep = wanted.contains_key(uid);
            if !keep {
                proxy.stop.cancel();
            }
            keep
        });
        wanted
    }
}

fn listen(addr: SocketAddr, targets: Targets, stop: CancellationToken) -> std::io::Result<()> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(std_listener)?;
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.cancelled() => return,
            };
            let Ok((mut inbound, _)) = accepted else { continue };
            let choice = {
                let t = targets.read();
                (!t.is_empty()).then(|| t[next.fetch_add(1, Ordering::Relaxed) % t.len()])
            };
            let Some(target) = choice else { continue };
            let stop = stop.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    _ = stop.cancelled() => {}
                }
            });
        }
    });
    Ok(())
}
