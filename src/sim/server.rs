//! The HTTP/1 accept loop: one hyper connection task per client, all ended at shutdown.

use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::sim::cluster::Cluster;
use crate::sim::handlers;

/// Accepts connections until the cluster shuts down.
pub async fn serve(cluster: Arc<Cluster>, listener: TcpListener) {
    loop {
        let (stream, _) = tokio::select! {
            _ = cluster.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
        };
        // As Go's net package (so the kube-apiserver) does: without TCP_NODELAY, Nagle holds a
        // watch event written right after a response head until the client's delayed ACK comes
        // (~40 ms on loopback); under a paused tokio clock the client's timers fire in that gap.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "setting TCP_NODELAY failed");
        }
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let service = {
                let cluster = cluster.clone();
                service_fn(move |req| {
                    let cluster = cluster.clone();
                    async move { Ok::<_, std::convert::Infallible>(handlers::handle(cluster, req).await) }
                })
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                result = conn => if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                },
                _ = cluster.shutdown.cancelled() => {}
            }
        });
    }
}
