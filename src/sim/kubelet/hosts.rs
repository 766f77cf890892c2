//! Cluster DNS as hosts files: each pod's `/etc/hosts` (bind-mounted in its mount namespace)
//! lists every name a pod resolves in a cluster, and is rewritten in place when Services or
//! their endpoints change (a bind mount pins the inode; glibc re-reads the file at each lookup).
//!
//! A pod's resolv.conf in a cluster searches `<ns>.svc.cluster.local svc.cluster.local
//! cluster.local`; a hosts file cannot search, so every form is listed: `<svc>` (same namespace
//! only), `<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`, and for the members of a
//! headless Service `<hostname>.<svc>` and the same suffixes. A ClusterIP Service resolves to its
//! loopback forwarder, a headless one to its endpoints' pod IPs. `localhost` is the pod's own
//! address: pods share the host's network, so the pod's loopback *is* its pod IP.

use std::fmt::Write as _;
use std::io::{Seek, Write};
use std::net::Ipv4Addr;
use std::path::Path;

/// What one Service resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceNames {
    /// The Service's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its forwarder's address (a ClusterIP Service).
    pub cluster_ip: Option<Ipv4Addr>,
    /// Its endpoints (hostname, pod IP): a headless Service resolves to these.
    pub members: Vec<(String, Ipv4Addr)>,
}

/// The pod whose file this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNames {
    /// `spec.hostname` (or the pod's name).
    pub hostname: String,
    /// `spec.subdomain`.
    pub subdomain: Option<String>,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod IP.
    pub ip: Ipv4Addr,
}

fn forms(name: &str, namespace: &str, same_namespace: bool) -> Vec<String> {
    let mut names = Vec::with_capacity(4);
    if same_namespace {
        names.push(name.to_owned());
    }
    names.push(format!("{name}.{namespace}"));
    names.push(format!("{name}.{namespace}.svc"));
    names.push(format!("{name}.{namespace}.svc.cluster.local"));
    names
}

/// The hosts file of `pod` in a cluster with `services`.
pub fn render(pod: &PodNames, services: &[ServiceNames]) -> String {
    let mut out = String::from("# Kubernetes-managed hosts file (dbcluster-operator's process kubelet).\n");
    let mut own = vec!["localhost".to_owned()];
    if let Some(sub) = &pod.subdomain {
        own.push(format!("{}.{sub}.{}.svc.cluster.local", pod.hostname, pod.namespace));
    }
    own.push(pod.hostname.clone());
    let _ = writeln!(out, "{}\t{}", pod.ip, own.join(" "));
    for svc in services {
        let same = svc.namespace == pod.namespace;
        let names = forms(&svc.name, &svc.namespace, same);
        match svc.cluster_ip {
            Some(ip) => {
                let _ = writeln!(out, "{ip}\t{}", names.join(" "));
            }
            None => {
                for (_, ip) in &svc.members {
                    let _ = writeln!(out, "{ip}\t{}", names.join(" "));
                }
            }
        }
        for (hostname, ip) in &svc.members {
            let member = forms(&format!("{hostname}.{}", svc.name), &svc.namespace, same);
            let _ = writeln!(out, "{ip}\t{}", member.join(" "));
        }
    }
    out
}

/// Replaces `path`'s content in place (same inode), if it differs.
pub fn write_in_place(path: &Path, content: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == content) {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(content.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cluster_form_of_a_name_is_listed() {
        let pod = PodNames {
            hostname: "db-1".into(),
            subdomain: Some("db".into()),
            namespace: "prod".into(),
            ip: Ipv4Addr::new(127, 10, 0, 2),
        };
        let services = vec![
            ServiceNames {
                name: "db-rw".into(),
                namespace: "prod".into(),
                cluster_ip: Some(Ipv4Addr::new(127, 11, 0, 1)),
                members: vec![],
            },
            ServiceNames {
                name: "db".into(),
                namespace: "prod".into(),
                cluster_ip: None,
                members: vec![("db-0".into(), Ipv4Addr::new(127, 10, 0, 1))],
            },
            ServiceNames {
                name: "other".into(),
                namespace: "dev".into(),
                cluster_ip: Some(Ipv4Addr::new(127, 11, 0, 3)),
                members: vec![],
            },
        ];
        let file = render(&pod, &services);
        let lines: Vec<&str> = file.lines().collect();
        assert!(lines.contains(&"127.10.0.2\tlocalhost db-1.db.prod.svc.cluster.local db-1"));
        assert!(lines.contains(&"127.11.0.1\tdb-rw db-rw.prod db-rw.prod.svc db-rw.prod.svc.cluster.local"));
        assert!(lines.contains(&"127.10.0.1\tdb db.prod db.prod.svc db.prod.svc.cluster.local"));
        assert!(
            lines.contains(
                &"127.10.0.1\tdb-0.db db-0.db.prod db-0.db.prod.svc db-0.db.prod.svc.cluster.local"
            )
        );
        assert!(
            lines.contains(&"127.11.0.3\tother.dev other.dev.svc other.dev.svc.cluster.local"),
            "no short name across namespaces"
        );
    }

    #[test]
    fn rewriting_keeps_the_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        write_in_place(&path, "a long first version\n").unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        write_in_place(&path, "short\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "short\n");
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
    }
}
