//! The signal that stops a container: the CRI config's `stop_signal`, else
//! the image's `StopSignal`, else SIGTERM.

use cri_api::v1;

use crate::error::{invalid, Error};
use crate::ImageInfo;

/// Real-time signals as glibc numbers them (the kernel's 32 and 33 are taken
/// by the C library), which is what `kill -l` and Docker use.
const SIGRTMIN: i32 = 34;
const SIGRTMAX: i32 = 64;

/// Signal names without the `SIG` prefix, with their Linux numbers.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("IOT", libc::SIGIOT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("POLL", libc::SIGPOLL),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// Parses a signal as an image config writes it: `SIGTERM`, `TERM`, `15`,
/// `SIGRTMIN+3`, `RTMAX-1` (any case). `None` when it names no signal.
pub fn parse_signal(s: &str) -> Option<i32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i32>() {
        return (1..=SIGRTMAX).contains(&n).then_some(n);
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return rt_offset(rest, SIGRTMIN, 1);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return rt_offset(rest, SIGRTMAX, -1);
    }
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, number)| *number)
}

/// `""` → `base`; `"+n"` (for RTMIN) or `"-n"` (for RTMAX) → `base ± n`, kept
/// within the real-time range.
fn rt_offset(rest: &str, base: i32, direction: i32) -> Option<i32> {
    if rest.is_empty() {
        return Some(base);
    }
    let sign = if direction > 0 { '+' } else { '-' };
    let n: i32 = rest.strip_prefix(sign)?.parse().ok()?;
    let number = base + direction * n;
    (SIGRTMIN..=SIGRTMAX).contains(&number).then_some(number)
}

/// The number of a CRI `Signal`; `None` for `RUNTIME_DEFAULT`.
pub fn cri_signal_number(signal: v1::Signal) -> Option<i32> {
    if signal == v1::Signal::RuntimeDefault {
        return None;
    }
    signal_number_of_name(signal.as_str_name())
}

/// The number of a CRI `Signal` value name: v0.36's (`SIGTERM`,
/// `SIGRTMINPLUS3`) and v0.37's, which only prefix them (`SIGNAL_SIGTERM`;
/// the numbers are the same), so that taking the v0.37 proto changes nothing.
fn signal_number_of_name(name: &str) -> Option<i32> {
    let name = name.strip_prefix("SIGNAL_").unwrap_or(name);
    if let Some(n) = name.strip_prefix("SIGRTMINPLUS") {
        return n.parse::<i32>().ok().map(|n| SIGRTMIN + n);
    }
    if let Some(n) = name.strip_prefix("SIGRTMAXMINUS") {
        return n.parse::<i32>().ok().map(|n| SIGRTMAX - n);
    }
    parse_signal(name)
}

/// The CRI name of signal `number` (`RuntimeDefault` when it has none).
pub fn cri_signal(number: i32) -> v1::Signal {
    // Every ContainerStatus asks: a table made once, not a search through
    // the enum's names on each call.
    static BY_NUMBER: std::sync::LazyLock<Vec<v1::Signal>> = std::sync::LazyLock::new(|| {
        let mut table = vec![v1::Signal::RuntimeDefault; SIGRTMAX as usize + 1];
        for signal in (1..=128).filter_map(|n| v1::Signal::try_from(n).ok()) {
            if let Some(n) = cri_signal_number(signal) {
                let slot = &mut table[n as usize];
                if *slot == v1::Signal::RuntimeDefault {
                    *slot = signal;
                }
            }
        }
        table
    });
    usize::try_from(number)
        .ok()
        .and_then(|n| BY_NUMBER.get(n).copied())
        .unwrap_or(v1::Signal::RuntimeDefault)
}

/// The signal that stops the container: the config's `stop_signal` unless it
/// is `RUNTIME_DEFAULT`, else the image's `StopSignal`, else SIGTERM.
pub fn stop_signal(
    id: &str,
    config: &v1::ContainerConfig,
    image: &ImageInfo,
) -> Result<i32, Error> {
    let signal = v1::Signal::try_from(config.stop_signal).map_err(|_| {
        invalid(
            id,
            "stop_signal",
            format!("unknown signal {}", config.stop_signal),
        )
    })?;
    if let Some(n) = cri_signal_number(signal) {
        return Ok(n);
    }
    if image.stop_signal.trim().is_empty() {
        return Ok(libc::SIGTERM);
    }
    parse_signal(&image.stop_signal).ok_or_else(|| {
        invalid(
            id,
            "image config StopSignal",
            format!("unknown signal {:?}", image.stop_signal),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v0_37_signal_names_have_the_same_numbers() {
        for (old, new) in [
            ("SIGTERM", "SIGNAL_SIGTERM"),
            ("SIGKILL", "SIGNAL_SIGKILL"),
            ("SIGRTMINPLUS3", "SIGNAL_SIGRTMINPLUS3"),
            ("SIGRTMAXMINUS1", "SIGNAL_SIGRTMAXMINUS1"),
        ] {
            assert!(signal_number_of_name(old).is_some(), "{old}");
            assert_eq!(signal_number_of_name(old), signal_number_of_name(new));
        }
        assert_eq!(signal_number_of_name("SIGNAL_SIGTERM"), Some(libc::SIGTERM));
    }

    #[test]
    fn numbers_to_cri_names() {
        assert_eq!(cri_signal(15), v1::Signal::Sigterm);
        assert_eq!(cri_signal(9), v1::Signal::Sigkill);
        assert_eq!(cri_signal(SIGRTMIN + 1), v1::Signal::Sigrtminplus1);
        assert_eq!(cri_signal(0), v1::Signal::RuntimeDefault);
        // The table gives what a search of the enum in order gives (the
        // first value of a number: SIGCHLD before its alias SIGCLD), for
        // every number.
        for n in -1..=130 {
            let searched = (1..=128)
                .filter_map(|v| v1::Signal::try_from(v).ok())
                .find(|s| cri_signal_number(*s) == Some(n))
                .unwrap_or(v1::Signal::RuntimeDefault);
            assert_eq!(cri_signal(n), searched, "{n}");
        }
    }

    #[test]
    fn parses_names_numbers_and_realtime() {
        assert_eq!(parse_signal("SIGTERM"), Some(15));
        assert_eq!(parse_signal("TERM"), Some(15));
        assert_eq!(parse_signal("term"), Some(15));
        assert_eq!(parse_signal(" 15 "), Some(15));
        assert_eq!(parse_signal("SIGQUIT"), Some(3));
        assert_eq!(parse_signal("SIGUSR1"), Some(10));
        assert_eq!(parse_signal("SIGWINCH"), Some(28));
        assert_eq!(parse_signal("SIGRTMIN"), Some(34));
        assert_eq!(parse_signal("SIGRTMIN+3"), Some(37));
        assert_eq!(parse_signal("RTMAX-1"), Some(63));
        assert_eq!(parse_signal("SIGRTMAX"), Some(64));
        assert_eq!(parse_signal("SIGRTMIN+31"), None);
        assert_eq!(parse_signal("SIGRTMIN-1"), None);
        assert_eq!(parse_signal("0"), None);
        assert_eq!(parse_signal("65"), None);
        assert_eq!(parse_signal("SIGNOPE"), None);
        assert_eq!(parse_signal(""), None);
    }

    #[test]
    fn cri_signals_map_to_numbers() {
        assert_eq!(cri_signal_number(v1::Signal::RuntimeDefault), None);
        assert_eq!(cri_signal_number(v1::Signal::Sigterm), Some(15));
        assert_eq!(cri_signal_number(v1::Signal::Sigkill), Some(9));
        assert_eq!(cri_signal_number(v1::Signal::Sigcld), Some(17));
        assert_eq!(cri_signal_number(v1::Signal::Sigiot), Some(6));
        assert_eq!(cri_signal_number(v1::Signal::Sigpoll), Some(29));
        assert_eq!(cri_signal_number(v1::Signal::Sigrtmin), Some(34));
        assert_eq!(cri_signal_number(v1::Signal::Sigrtminplus1), Some(35));
        assert_eq!(cri_signal_number(v1::Signal::Sigrtminplus15), Some(49));
        assert_eq!(cri_signal_number(v1::Signal::Sigrtmaxminus14), Some(50));
        assert_eq!(cri_signal_number(v1::Signal::Sigrtmaxminus1), Some(63));
        assert_eq!(cri_signal_number(v1::Signal::Sigrtmax), Some(64));
        // Every CRI signal has a number.
        for n in 1..=65 {
            let s = v1::Signal::try_from(n).unwrap();
            assert!(cri_signal_number(s).is_some(), "{s:?}");
        }
    }

    #[test]
    fn stop_signal_prefers_config_then_image_then_sigterm() {
        let mut config = v1::ContainerConfig::default();
        let mut image = ImageInfo::default();
        assert_eq!(stop_signal("c", &config, &image).unwrap(), libc::SIGTERM);
        image.stop_signal = "SIGQUIT".into();
        assert_eq!(stop_signal("c", &config, &image).unwrap(), libc::SIGQUIT);
        config.stop_signal = v1::Signal::Sigusr2 as i32;
        assert_eq!(stop_signal("c", &config, &image).unwrap(), libc::SIGUSR2);
    }

    #[test]
    fn stop_signal_errors_name_the_field() {
        let mut config = v1::ContainerConfig::default();
        let image = ImageInfo {
            stop_signal: "SIGBOGUS".into(),
            ..Default::default()
        };
        let e = stop_signal("c1", &config, &image).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(
            e.to_string().contains("c1") && e.to_string().contains("StopSignal"),
            "{e}"
        );
        config.stop_signal = 99;
        let e = stop_signal("c1", &config, &image).unwrap_err();
        assert!(e.to_string().contains("stop_signal"), "{e}");
    }
}
