//! What the cAdvisor-style metrics read beyond the CRI stats: more of the
//! memory controller's files, block I/O per device, and the filesystem of
//! the writable layer. Files a kernel does not have give no value (`None`,
//! or no device), never a default one.

use std::collections::HashMap;
use std::path::Path;

/// Memory counters the CRI stats do not carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct MemoryMore {
    /// Times usage hit the limit (v1 `memory.failcnt`; v2 the `max` events).
    pub(super) failcnt: Option<u64>,
    /// Peak usage (v1 `memory.max_usage_in_bytes`; v2 `memory.peak`, 5.19+).
    pub(super) max_usage: Option<u64>,
    /// Kernel memory (v1 `memory.kmem.usage_in_bytes`; v2 `kernel` of
    /// `memory.stat`, or the sum of the kernel items it lists before 5.18).
    pub(super) kernel: Option<u64>,
    /// Page cache mapped into processes.
    pub(super) mapped_file: Option<u64>,
    /// Page faults and major page faults of the cgroup itself, not of the
    /// cgroups below it (v1 counts those apart; on v2 they are the same).
    pub(super) own_faults: Option<(u64, u64)>,
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A flat keyed file (`memory.stat`, `memory.events`); empty when absent.
fn keyed(path: &Path) -> HashMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (k, v) = line.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The kernel memory items v2's `memory.stat` lists (before 5.18 added
/// their sum as `kernel`).
const V2_KERNEL_ITEMS: [&str; 6] = [
    "kernel_stack",
    "pagetables",
    "sec_pagetables",
    "percpu",
    "sock",
    "slab",
];

fn faults(stat: &HashMap<String, u64>) -> Option<(u64, u64)> {
    Some((*stat.get("pgfault")?, *stat.get("pgmajfault")?))
}

/// Reads the memory controller's directory `dir`.
pub(super) fn memory_more(dir: &Path, v2: bool) -> MemoryMore {
    let stat = keyed(&dir.join("memory.stat"));
    if v2 {
        let kernel = stat.get("kernel").copied().or_else(|| {
            let items: Vec<u64> = V2_KERNEL_ITEMS
                .iter()
                .filter_map(|k| stat.get(*k).copied())
                .collect();
            (!items.is_empty()).then(|| items.iter().sum())
        });
        MemoryMore {
            failcnt: keyed(&dir.join("memory.events")).get("max").copied(),
            max_usage: read_u64(&dir.join("memory.peak")),
            kernel,
            mapped_file: stat.get("file_mapped").copied(),
            own_faults: faults(&stat),
        }
    } else {
        MemoryMore {
            failcnt: read_u64(&dir.join("memory.failcnt")),
            max_usage: read_u64(&dir.join("memory.max_usage_in_bytes")),
            kernel: read_u64(&dir.join("memory.kmem.usage_in_bytes")),
            mapped_file: stat.get("total_mapped_file").copied(),
            own_faults: faults(&stat),
        }
    }
}

/// Block I/O of one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct DeviceIo {
    pub(super) major: u64,
    pub(super) minor: u64,
    /// `/dev/<name>` from sysfs, else `major:minor`.
    pub(super) device: String,
    /// Bytes per operation, by cAdvisor's names (`Read`, `Write`…).
    pub(super) bytes: Vec<(String, u64)>,
    /// Operations completed per operation.
    pub(super) ios: Vec<(String, u64)>,
}

impl DeviceIo {
    fn get(list: &[(String, u64)], op: &str) -> Option<u64> {
        list.iter().find(|(o, _)| o == op).map(|(_, v)| *v)
    }
    pub(super) fn bytes(&self, op: &str) -> Option<u64> {
        DeviceIo::get(&self.bytes, op)
    }
    pub(super) fn ios(&self, op: &str) -> Option<u64> {
        DeviceIo::get(&self.ios, op)
    }
}

/// The device entry for `major:minor` in `devices`, made if new.
fn device_entry(devices: &mut Vec<DeviceIo>, major: u64, minor: u64) -> &mut DeviceIo {
    let at = match devices
        .iter()
        .position(|d| d.major == major && d.minor == minor)
    {
        Some(at) => at,
        None => {
            devices.push(DeviceIo {
                major,
                minor,
                device: device_name(major, minor),
                ..Default::default()
            });
            devices.len() - 1
        }
    };
    &mut devices[at]
}

/// `/dev/<name>` of a block device, from `/sys/dev/block/M:m/uevent`.
fn device_name(major: u64, minor: u64) -> String {
    std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("DEVNAME=").map(|n| format!("/dev/{n}")))
        })
        .unwrap_or_else(|| format!("{major}:{minor}"))
}

fn major_minor(s: &str) -> Option<(u64, u64)> {
    let (major, minor) = s.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// v2 `io.stat`: `M:m rbytes=… wbytes=… rios=… wios=… dbytes=… dios=…`.
pub(super) fn parse_io_stat(text: &str, devices: &mut Vec<DeviceIo>) {
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some((major, minor)) = words.next().and_then(major_minor) else {
            continue;
        };
        let entry = device_entry(devices, major, minor);
        for (key, value) in words.filter_map(|w| w.split_once('=')) {
            let Ok(value) = value.parse() else { continue };
            let (list, op) = match key {
                "rbytes" => (&mut entry.bytes, "Read"),
                "wbytes" => (&mut entry.bytes, "Write"),
                "dbytes" => (&mut entry.bytes, "Discard"),
                "rios" => (&mut entry.ios, "Read"),
                "wios" => (&mut entry.ios, "Write"),
                "dios" => (&mut entry.ios, "Discard"),
                _ => continue,
            };
            list.push((op.to_string(), value));
        }
    }
}

/// v1 `blkio.*_recursive`: `M:m Op value` lines (and a `Total value`).
pub(super) fn parse_blkio(text: &str, devices: &mut Vec<DeviceIo>, bytes: bool) {
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(dev), Some(op), Some(value)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let (Some((major, minor)), Ok(value)) = (major_minor(dev), value.parse()) else {
            continue;
        };
        let entry = device_entry(devices, major, minor);
        let list = if bytes {
            &mut entry.bytes
        } else {
            &mut entry.ios
        };
        list.push((op.to_string(), value));
    }
}

/// Block I/O of the cgroup whose I/O controller directory is `dir`.
pub(super) fn block_io(dir: &Path, v2: bool) -> Vec<DeviceIo> {
    let mut devices = Vec::new();
    if v2 {
        if let Ok(text) = std::fs::read_to_string(dir.join("io.stat")) {
            parse_io_stat(&text, &mut devices);
        }
        return devices;
    }
    // The throttling layer counts on every kernel; the scheduler's own
    // files only with CFQ/BFQ.
    for (file, bytes) in [
        ("io_service_bytes_recursive", true),
        ("io_serviced_recursive", false),
    ] {
        let text = ["blkio.throttle.", "blkio."]
            .iter()
            .find_map(|prefix| std::fs::read_to_string(dir.join(format!("{prefix}{file}"))).ok());
        if let Some(text) = text {
            parse_blkio(&text, &mut devices, bytes);
        }
    }
    devices
}

/// The filesystem of a writable layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FsCapacity {
    pub(super) limit_bytes: u64,
    pub(super) inodes_total: u64,
    pub(super) inodes_free: u64,
}

/// The capacity of the filesystem `path` is on.
pub(super) fn fs_capacity(path: &Path) -> Option<FsCapacity> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    Some(FsCapacity {
        limit_bytes: (st.blocks() as u64).saturating_mul(st.fragment_size() as u64),
        inodes_total: st.files() as u64,
        inodes_free: st.files_free() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_io_stat() {
        let mut d = Vec::new();
        parse_io_stat(
            "259:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n7:0 rbytes=1 wbytes=0 rios=1 wios=0\nbad line\n",
            &mut d,
        );
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].major, d[0].minor), (259, 0));
        assert_eq!(d[0].bytes("Read"), Some(4096));
        assert_eq!(d[0].bytes("Write"), Some(8192));
        assert_eq!(d[0].ios("Write"), Some(2));
        assert_eq!(d[0].bytes("Discard"), Some(0));
        assert_eq!(d[1].bytes("Discard"), None);
        assert!(
            d[0].device == "259:0" || d[0].device.starts_with("/dev/"),
            "{}",
            d[0].device
        );
    }

    #[test]
    fn v1_blkio() {
        let mut d = Vec::new();
        parse_blkio(
            "8:0 Read 512\n8:0 Write 1024\n8:0 Total 1536\nTotal 1536\n",
            &mut d,
            true,
        );
        parse_blkio(
            "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 3\n",
            &mut d,
            false,
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].bytes("Read"), Some(512));
        assert_eq!(d[0].bytes("Total"), Some(1536));
        assert_eq!(d[0].ios("Write"), Some(2));
    }

    #[test]
    fn memory_files_v1_and_v2() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "memory.stat",
            "total_mapped_file 40\nkernel_stack 8\nslab 16\nfile_mapped 12\npgfault 7\npgmajfault 1\n",
        );
        write("memory.failcnt", "3\n");
        write("memory.max_usage_in_bytes", "900\n");
        let v1 = memory_more(dir.path(), false);
        assert_eq!(
            v1,
            MemoryMore {
                failcnt: Some(3),
                max_usage: Some(900),
                kernel: None,
                mapped_file: Some(40),
                own_faults: Some((7, 1)),
            }
        );
        write("memory.events", "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n");
        let v2 = memory_more(dir.path(), true);
        // No memory.peak (before 5.19): no peak; no `kernel` key: the sum.
        assert_eq!(
            v2,
            MemoryMore {
                failcnt: Some(5),
                max_usage: None,
                kernel: Some(24),
                mapped_file: Some(12),
                own_faults: Some((7, 1)),
            }
        );
        write("memory.stat", "kernel 100\nkernel_stack 8\n");
        write("memory.peak", "1000\n");
        let v2 = memory_more(dir.path(), true);
        assert_eq!(
            (v2.kernel, v2.max_usage, v2.mapped_file),
            (Some(100), Some(1000), None)
        );
    }

    #[test]
    fn fs_capacity_of_a_real_filesystem() {
        let c = fs_capacity(Path::new("/")).unwrap();
        assert!(c.limit_bytes > 0);
        assert!(c.inodes_free <= c.inodes_total);
        assert_eq!(fs_capacity(Path::new("/nonexistent/berth")), None);
    }
}
