//! The processes of a cgroup tree.

use std::path::Path;

/// Most cgroups a tree is walked through (a container running systemd
/// makes a few; this bounds a hostile one).
pub const MAX_CGROUPS: usize = 4096;

/// The pids in the cgroup at `dir` and the cgroups below it (`cgroup.procs`
/// of each, at most [`MAX_CGROUPS`] cgroups, the rest left out); `None`
/// when the cgroup is gone.
pub fn pids_below(dir: &Path) -> Option<Vec<u32>> {
    let top = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    let mut pids: Vec<u32> = parse_pids(&top);
    let mut stack = vec![dir.to_path_buf()];
    let mut walked = 0;
    while let Some(cgroup) = stack.pop() {
        walked += 1;
        if walked > MAX_CGROUPS {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&cgroup) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let sub = entry.path();
                if let Ok(text) = std::fs::read_to_string(sub.join("cgroup.procs")) {
                    pids.extend(parse_pids(&text));
                }
                stack.push(sub);
            }
        }
    }
    Some(pids)
}

fn parse_pids(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_is_read_and_a_gone_cgroup_is_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "1\n2\n").unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("cgroup.procs"), "3\nx\n").unwrap();
        let mut pids = pids_below(dir.path()).unwrap();
        pids.sort();
        assert_eq!(pids, [1, 2, 3]);
        assert_eq!(pids_below(&dir.path().join("gone")), None);
    }
}
