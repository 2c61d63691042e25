//! Which CRI annotations reach the OCI runtime. Runtimes act on annotations
//! of the spec (crun on `run.oci.*`, kata on `io.katacontainers.*`), so a
//! pod author must not be able to set them: none pass unless the runtime
//! handler allows them by pattern, as containerd's `pod_annotations` and
//! `container_annotations` do.
//!
//! Patterns are Go's `path.Match` globs, as containerd matches them: `*` is
//! any run of characters but `/`, `?` one character but `/`, `[a-z]` /
//! `[^a-z]` a class, `\` quotes the next character. A malformed pattern
//! matches nothing.

use std::collections::HashMap;

/// The annotations whose key matches one of `patterns`.
pub(crate) fn passthrough(
    annotations: &HashMap<String, String>,
    patterns: &[String],
) -> HashMap<String, String> {
    if patterns.is_empty() {
        return HashMap::new();
    }
    annotations
        .iter()
        .filter(|(k, _)| patterns.iter().any(|p| glob_match(p, k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether `name` matches the glob `pattern` (see the module doc).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches(&p, &n).unwrap_or(false)
}

/// `None` for a malformed pattern.
fn matches(p: &[char], n: &[char]) -> Option<bool> {
    // Iterative with one backtrack point for `*`, the usual way: a later `*`
    // supersedes an earlier one, since `*` cannot cross `/` and neither can
    // what it stood for.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
            continue;
        }
        if pi < p.len() {
            let (ok, width) = single(&p[pi..], n[ni])?;
            if ok {
                pi += width;
                ni += 1;
                continue;
            }
        }
        match star {
            Some((sp, sn)) if n[sn] != '/' => {
                star = Some((sp, sn + 1));
                pi = sp + 1;
                ni = sn + 1;
            }
            _ => return Some(false),
        }
    }
    // Only `*`s may remain.
    let rest = &p[pi..];
    check_rest(rest)?;
    Some(rest.iter().all(|c| *c == '*'))
}

/// Checks that the rest of a pattern is well formed.
fn check_rest(p: &[char]) -> Option<()> {
    let mut i = 0;
    while i < p.len() {
        if p[i] == '*' {
            i += 1;
            continue;
        }
        let (_, width) = single(&p[i..], 'a')?;
        i += width;
    }
    Some(())
}

/// Matches one pattern item (not `*`) at the start of `p` against `c`:
/// `Some((matched, width))`; `None` when malformed.
fn single(p: &[char], c: char) -> Option<(bool, usize)> {
    match p[0] {
        '?' => Some((c != '/', 1)),
        '\\' => {
            let q = *p.get(1)?;
            Some((q == c, 2))
        }
        '[' => {
            let mut i = 1;
            let negate = matches!(p.get(1), Some('^'));
            if negate {
                i += 1;
            }
            let mut hit = false;
            let mut first = true;
            loop {
                let mut lo = *p.get(i)?;
                if lo == ']' && !first {
                    i += 1;
                    break;
                }
                first = false;
                if lo == '\\' {
                    i += 1;
                    lo = *p.get(i)?;
                }
                let mut hi = lo;
                if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|c| *c != ']') {
                    hi = p[i + 2];
                    if hi == '\\' {
                        hi = *p.get(i + 3)?;
                        i += 1;
                    }
                    i += 2;
                }
                i += 1;
                if lo <= c && c <= hi {
                    hit = true;
                }
            }
            Some((hit != negate && c != '/', i))
        }
        lit => Some((lit == c, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_as_go_path_match() {
        for (p, n, want) in [
            (
                "io.katacontainers.*",
                "io.katacontainers.config.hypervisor",
                true,
            ),
            ("io.katacontainers.*", "io.katacontainers.", true),
            ("io.katacontainers.*", "run.oci.keep_original_groups", false),
            ("run.oci.*", "run.oci.handler", true),
            ("*", "anything.at.all", true),
            ("*", "a/b", false),
            ("cdi.k8s.io/*", "cdi.k8s.io/vendor_gpu", true),
            ("cdi.k8s.io/*", "cdi.k8s.io/a/b", false),
            ("a?c", "abc", true),
            ("a?c", "a/c", false),
            ("a[bx]c", "axc", true),
            ("a[^bx]c", "abc", false),
            ("a[a-c]*", "abzz", true),
            ("a\\*", "a*", true),
            ("a\\*", "ab", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*.x*y", "a.xzzy", true),
            ("*.x*y", "a.xzz", false),
            ("[", "[", false),
            ("a[", "a", false),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p:?} vs {n:?}");
        }
    }

    #[test]
    fn nothing_passes_without_patterns() {
        let a: HashMap<String, String> = [
            ("run.oci.keep_original_groups".to_string(), "1".to_string()),
            ("team".to_string(), "a".to_string()),
        ]
        .into();
        assert!(passthrough(&a, &[]).is_empty());
        let got = passthrough(&a, &["team".to_string()]);
        assert_eq!(got.len(), 1);
        assert_eq!(got["team"], "a");
    }
}
