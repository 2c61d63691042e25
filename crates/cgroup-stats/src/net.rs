//! Network interface counters of a network namespace, read from
//! `/proc/<pid>/net/dev` of a process in it: that file shows the counters
//! of the namespace *that process* is in, so no thread ever has to enter
//! the namespace.

use std::path::PathBuf;

use crate::Error;

/// Cumulative counters of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceStats {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The interfaces of the network namespace process `pid` is in.
pub fn interfaces_of_pid(pid: u32) -> Result<Vec<InterfaceStats>, Error> {
    let path = PathBuf::from(format!("/proc/{pid}/net/dev"));
    let text = std::fs::read_to_string(&path).map_err(Error::read(path))?;
    Ok(parse_net_dev(&text))
}

/// The interfaces in a `/proc/net/dev` text (two header lines, then
/// `name: 8 receive counters 8 transmit counters`).
pub fn parse_net_dev(text: &str) -> Vec<InterfaceStats> {
    text.lines()
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let n: Vec<u64> = counters
                .split_whitespace()
                .map(|w| w.parse().ok())
                .collect::<Option<_>>()?;
            if n.len() < 16 {
                return None;
            }
            Some(InterfaceStats {
                name: name.trim().to_string(),
                rx_bytes: n[0],
                rx_packets: n[1],
                rx_errors: n[2],
                rx_dropped: n[3],
                tx_bytes: n[8],
                tx_packets: n[9],
                tx_errors: n[10],
                tx_dropped: n[11],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     840      10    0    0    0     0          0         0      840      10    0    0    0     0       0          0
  eth0: 1234567    1500    2    3    0     0          0         0   765432     900    4    5    0     0       0          0
";

    #[test]
    fn parses_counters() {
        let ifs = parse_net_dev(NET_DEV);
        assert_eq!(ifs.len(), 2);
        assert_eq!(ifs[0].name, "lo");
        let eth0 = &ifs[1];
        assert_eq!(
            eth0,
            &InterfaceStats {
                name: "eth0".into(),
                rx_bytes: 1234567,
                rx_packets: 1500,
                rx_errors: 2,
                rx_dropped: 3,
                tx_bytes: 765432,
                tx_packets: 900,
                tx_errors: 4,
                tx_dropped: 5,
            }
        );
    }

    #[test]
    fn own_namespace_has_loopback() {
        let ifs = interfaces_of_pid(std::process::id()).unwrap();
        assert!(ifs.iter().any(|i| i.name == "lo"), "{ifs:?}");
        assert!(interfaces_of_pid(u32::MAX).unwrap_err().is_not_found());
    }
}
