//! Loopback addresses for pods and Services, unique across every simulator on the machine.
//!
//! Every pod gets its own address in `127.10.0.0/16` (its `status.podIP`) and every Service with a
//! ClusterIP its own in `127.11.0.0/16`, so each pod listens on its own port 5432 as in a cluster.
//! Linux answers on all of `127.0.0.0/8` without configuration. An address is held by an
//! exclusive `flock` on a file named after it in a shared directory: simulators in other processes
//! (parallel test binaries) skip held addresses, and the kernel releases the lock when the holder
//! exits, however abruptly.

#![allow(unsafe_code, reason = "libc: flock on an address lock file")]

use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Which range an address comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// Pod IPs: `127.10.x.y`.
    Pods,
    /// Service ClusterIPs (the kube-proxy stand-in listens there): `127.11.x.y`.
    Services,
}

impl Range {
    fn second_octet(self) -> u8 {
        match self {
            Range::Pods => 10,
            Range::Services => 11,
        }
    }
}

/// A held address; released when dropped.
#[derive(Debug)]
pub struct Lease {
    /// The address.
    pub ip: Ipv4Addr,
    _lock: File,
}

fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("dbcluster-sim-addresses")
}

/// Holds the first free address of `range`, searching from a random offset.
pub fn allocate(range: Range) -> std::io::Result<Lease> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir)?;
    let start: u32 = rand::random::<u32>() % 65_024;
    for step in 0..65_024u32 {
        let n = (start + step) % 65_024 + 256;
        let ip = Ipv4Addr::new(127, range.second_octet(), (n >> 8) as u8, (n & 0xff) as u8);
        if ip.octets()[3] == 0 || ip.octets()[3] == 255 {
            continue;
        }
        let file =
            OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(ip.to_string()))?;
        // SAFETY: flock on a file descriptor this function owns; no memory is involved.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if locked {
            return Ok(Lease { ip, _lock: file });
        }
    }
    Err(std::io::Error::other(format!("every loopback address of {range:?} is in use")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_addresses_are_never_handed_out_twice() {
        let leases: Vec<Lease> = (0..50).map(|_| allocate(Range::Pods).unwrap()).collect();
        let mut ips: Vec<Ipv4Addr> = leases.iter().map(|l| l.ip).collect();
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), 50);
        assert!(ips.iter().all(|ip| ip.octets()[..2] == [127, 10]));
        assert_eq!(allocate(Range::Services).unwrap().ip.octets()[1], 11);
    }
}
