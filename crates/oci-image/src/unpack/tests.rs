//! Tests of layer application: hostile entries, whiteouts, metadata,
//! sparse files and the limits; and the tar, disk-usage and full-file-system
//! helpers other tests of the crate use.

use super::whiteout::OPAQUE_XATTR;
use super::*;
use nix::sys::stat::makedev;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A tar entry header with fixed metadata.
fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_000_000);
    h
}

/// Raw path bytes written straight into the header (the tar crate's
/// builder refuses `..` and absolute paths, which hostile layers have).
fn set_raw_path(h: &mut tar::Header, path: &str) {
    let name = &mut h.as_old_mut().name;
    name.fill(0);
    name[..path.len()].copy_from_slice(path.as_bytes());
}

fn set_raw_link(h: &mut tar::Header, target: &str) {
    let link = &mut h.as_old_mut().linkname;
    link.fill(0);
    link[..target.len()].copy_from_slice(target.as_bytes());
}

enum E<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
}

fn build(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let (mut h, path, data): (tar::Header, &str, &[u8]) = match e {
            E::Dir(p) => (header(tar::EntryType::Directory, 0, 0o755), p, b""),
            E::File(p, d) => (header(tar::EntryType::Regular, d.len() as u64, 0o644), p, d),
            E::Symlink(p, t) => {
                let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                set_raw_link(&mut h, t);
                (h, p, b"")
            }
            E::Hardlink(p, t) => {
                let mut h = header(tar::EntryType::Link, 0, 0o644);
                set_raw_link(&mut h, t);
                (h, p, b"")
            }
        };
        set_raw_path(&mut h, path);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

/// A sandbox: `outside/` next to the snapshot root `root/`, so escapes
/// would be visible.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("root")).unwrap();
        std::fs::create_dir(dir.path().join("outside")).unwrap();
        std::fs::write(dir.path().join("outside/victim"), b"original").unwrap();
        Sandbox { dir }
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    fn apply(&self, tar_bytes: &[u8]) -> Result<()> {
        self.apply_with(tar_bytes, &UnpackLimits::default(), &|| false)
    }
    fn apply_with(
        &self,
        mut tar_bytes: &[u8],
        limits: &UnpackLimits,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<()> {
        let mut applier = Applier::new(&self.root(), is_root()).unwrap();
        applier.apply_stream(&mut tar_bytes, limits, cancelled)
    }
    /// Everything outside `root/` is as the sandbox made it.
    fn assert_outside_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let mut names = names;
        names.sort();
        assert_eq!(names, ["outside", "root"]);
        let outside: Vec<_> = std::fs::read_dir(self.dir.path().join("outside"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(outside, ["victim"]);
        assert_eq!(
            std::fs::read(self.dir.path().join("outside/victim")).unwrap(),
            b"original"
        );
    }
}

fn assert_hostile(r: Result<()>) {
    match r {
        Err(UnpackError::Hostile { .. }) => {}
        other => panic!("expected a hostile-entry error, got {other:?}"),
    }
}

#[test]
fn regular_layer_keeps_files_links_and_times() {
    let sb = Sandbox::new();
    let tar = build(&[
        E::Dir("etc/"),
        E::File("etc/hosts", b"127.0.0.1 localhost\n"),
        E::Hardlink("etc/hosts2", "etc/hosts"),
        E::Symlink("etc/abs", "/outside/victim"),
        E::Symlink("etc/rel", "../../../outside/victim"),
        E::File("deep/er/file", b"x"),
    ]);
    sb.apply(&tar).unwrap();
    let root = sb.root();
    assert_eq!(
        std::fs::read(root.join("etc/hosts")).unwrap(),
        b"127.0.0.1 localhost\n"
    );
    let a = std::fs::metadata(root.join("etc/hosts")).unwrap();
    let b = std::fs::metadata(root.join("etc/hosts2")).unwrap();
    assert_eq!(a.ino(), b.ino());
    assert_eq!(a.mode() & 0o7777, 0o644);
    assert_eq!(a.mtime(), 1_000_000);
    assert_eq!(
        std::fs::metadata(root.join("etc")).unwrap().mtime(),
        1_000_000
    );
    assert_eq!(
        std::fs::read_link(root.join("etc/abs")).unwrap(),
        Path::new("/outside/victim")
    );
    assert_eq!(
        std::fs::symlink_metadata(root.join("etc/rel"))
            .unwrap()
            .mtime(),
        1_000_000
    );
    assert_eq!(
        std::fs::metadata(root.join("deep/er"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    sb.assert_outside_untouched();
}

#[test]
fn dotdot_and_absolute_paths_are_refused() {
    for path in [
        "../outside/evil",
        "a/../../outside/evil",
        "/outside/evil",
        "./../evil",
    ] {
        let sb = Sandbox::new();
        assert_hostile(sb.apply(&build(&[E::File(path, b"evil")])));
        sb.assert_outside_untouched();
    }
}

#[test]
fn writing_through_a_symlink_is_refused() {
    let sb = Sandbox::new();
    let outside = sb.dir.path().join("outside");
    let tar = build(&[
        E::Symlink("escape", outside.to_str().unwrap()),
        E::File("escape/victim", b"evil"),
    ]);
    assert_hostile(sb.apply(&tar));
    sb.assert_outside_untouched();

    let sb = Sandbox::new();
    let tar = build(&[E::Symlink("up", "../outside"), E::File("up/new", b"evil")]);
    assert_hostile(sb.apply(&tar));
    sb.assert_outside_untouched();
}

#[test]
fn a_file_replacing_a_symlink_does_not_follow_it() {
    let sb = Sandbox::new();
    let victim = sb.dir.path().join("outside/victim");
    let tar = build(&[
        E::Symlink("x", victim.to_str().unwrap()),
        E::File("x", b"evil"),
    ]);
    sb.apply(&tar).unwrap();
    assert_eq!(std::fs::read(sb.root().join("x")).unwrap(), b"evil");
    assert!(!std::fs::symlink_metadata(sb.root().join("x"))
        .unwrap()
        .file_type()
        .is_symlink());
    sb.assert_outside_untouched();
}

#[test]
fn hard_links_out_of_the_layer_are_refused() {
    for target in ["../outside/victim", "/etc/passwd", "missing/file"] {
        let sb = Sandbox::new();
        assert_hostile(sb.apply(&build(&[E::Hardlink("link", target)])));
        sb.assert_outside_untouched();
    }
    // Through a symlinked directory of the layer.
    let sb = Sandbox::new();
    let outside = sb.dir.path().join("outside");
    let tar = build(&[
        E::Symlink("d", outside.to_str().unwrap()),
        E::Hardlink("link", "d/victim"),
    ]);
    assert_hostile(sb.apply(&tar));
    sb.assert_outside_untouched();
    // A hard link to an escaping symlink links the symlink, not its target.
    let sb = Sandbox::new();
    let victim = sb.dir.path().join("outside/victim");
    let tar = build(&[
        E::Symlink("s", victim.to_str().unwrap()),
        E::Hardlink("link", "s"),
        E::File("link", b"evil"),
    ]);
    sb.apply(&tar).unwrap();
    sb.assert_outside_untouched();
}

#[test]
fn truncated_stream_is_an_error() {
    let sb = Sandbox::new();
    let tar = build(&[E::File("big", &[7u8; 4096])]);
    let cut = &tar[..1024];
    match sb.apply(cut) {
        Err(UnpackError::Read(_)) => {}
        other => panic!("expected a read error, got {other:?}"),
    }
}

#[test]
fn overlay_xattrs_from_the_layer_are_refused() {
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("SCHILY.xattr.trusted.overlay.redirect", b"/x".as_slice())])
        .unwrap();
    let mut h = header(tar::EntryType::Directory, 0, 0o755);
    h.set_path("d").unwrap();
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let sb = Sandbox::new();
    assert_hostile(sb.apply(&b.into_inner().unwrap()));
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn whiteouts_become_overlay_whiteouts() {
    assert!(
        is_root(),
        "needs root: whiteouts are device nodes and trusted xattrs"
    );
    let sb = Sandbox::new();
    let tar = build(&[
        E::Dir("data/"),
        E::File("data/.wh.gone", b""),
        E::Dir("data/opq/"),
        E::File("data/opq/.wh..wh..opq", b""),
        E::File("data/opq/new", b"n"),
        E::File("data/.wh..wh.plnk", b""),
        E::File(".wh.top", b""),
    ]);
    sb.apply(&tar).unwrap();
    let root = sb.root();
    for wh in ["data/gone", "top"] {
        let md = std::fs::symlink_metadata(root.join(wh)).unwrap();
        assert!(md.file_type().is_char_device(), "{wh}");
        assert_eq!(md.rdev(), 0, "{wh}");
    }
    assert_eq!(
        get_xattr(&root.join("data/opq"), OPAQUE_XATTR).as_deref(),
        Some(&b"y"[..])
    );
    assert_eq!(get_xattr(&root.join("data"), OPAQUE_XATTR), None);
    assert!(!root.join("data/opq/.wh..wh..opq").exists());
    assert!(std::fs::symlink_metadata(root.join("data/.wh..wh.plnk")).is_err());
    assert!(std::fs::symlink_metadata(root.join(".wh.top")).is_err());
    assert_eq!(std::fs::read(root.join("data/opq/new")).unwrap(), b"n");
    // The whiteout escapes nothing either.
    let sb = Sandbox::new();
    assert_hostile(sb.apply(&build(&[E::File("../outside/.wh.victim", b"")])));
    sb.assert_outside_untouched();
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn ownership_devices_and_xattrs_are_kept() {
    assert!(is_root(), "needs root: ownership and device nodes");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = header(tar::EntryType::Regular, 1, 0o4755);
    h.set_uid(1000);
    h.set_gid(1001);
    h.set_path("suid").unwrap();
    h.set_cksum();
    b.append(&h, &b"x"[..]).unwrap();
    let mut h = header(tar::EntryType::Char, 0, 0o666);
    h.set_device_major(1).unwrap();
    h.set_device_minor(3).unwrap();
    h.set_path("null").unwrap();
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let mut h = header(tar::EntryType::Fifo, 0, 0o600);
    h.set_path("fifo").unwrap();
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    b.append_pax_extensions([("SCHILY.xattr.user.berth", b"yes".as_slice())])
        .unwrap();
    let mut h = header(tar::EntryType::Regular, 0, 0o600);
    h.set_path("tagged").unwrap();
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let sb = Sandbox::new();
    sb.apply(&b.into_inner().unwrap()).unwrap();
    let root = sb.root();
    let md = std::fs::metadata(root.join("suid")).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o7777),
        (1000, 1001, 0o4755)
    );
    let md = std::fs::symlink_metadata(root.join("null")).unwrap();
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), makedev(1, 3));
    assert_eq!(md.mode() & 0o777, 0o666);
    assert!(std::fs::symlink_metadata(root.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    // user.* xattrs need a file system that has them (tmpfs, ext4, xfs …).
    if let Some(v) = get_xattr(&root.join("tagged"), "user.berth") {
        assert_eq!(v, b"yes");
    }
}

/// A GNU sparse (type 'S') entry `name` of apparent size `real_size`
/// with data `blocks` (offset, bytes; every block but the last a multiple
/// of 512 bytes, at most 3 of them), as a whole tar.
pub(crate) fn sparse_tar(name: &str, real_size: u64, blocks: &[(u64, &[u8])]) -> Vec<u8> {
    assert!(blocks.len() <= 3);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_000_000);
    h.set_path(name).unwrap();
    let mut data = Vec::new();
    {
        let gnu = h.as_gnu_mut().unwrap();
        for (i, (off, bytes)) in blocks.iter().enumerate() {
            gnu.sparse[i].set_offset(*off);
            gnu.sparse[i].set_length(bytes.len() as u64);
            data.extend_from_slice(bytes);
        }
        // GNU tar ends the map with an empty block at the apparent size.
        gnu.sparse[blocks.len()].set_offset(real_size);
        gnu.sparse[blocks.len()].set_length(0);
        gnu.set_real_size(real_size);
    }
    h.set_size(data.len() as u64);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &data[..]).unwrap();
    b.into_inner().unwrap()
}

/// Disk space used under `dir` (like `du -s`, in bytes).
pub(crate) fn du(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let md = std::fs::symlink_metadata(&d).unwrap();
        total += md.blocks() * 512;
        if md.is_dir() {
            for e in std::fs::read_dir(&d).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    total
}

fn assert_limit(r: Result<()>, needle: &str) -> String {
    match r {
        Err(UnpackError::Limit(msg)) | Err(UnpackError::NoSpace { reason: msg, .. }) => {
            assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
            msg
        }
        other => panic!("expected a limit error with {needle:?}, got {other:?}"),
    }
}

#[test]
fn gnu_sparse_files_are_written_sparse() {
    let sb = Sandbox::new();
    let a = [b'a'; 512];
    let b = [b'b'; 100];
    let size = 256 << 20;
    let tar = sparse_tar("holes", size, &[(0, &a), (128 << 20, &b)]);
    sb.apply(&tar).unwrap();
    let path = sb.root().join("holes");
    let md = std::fs::metadata(&path).unwrap();
    assert_eq!(md.len(), size);
    assert!(
        md.blocks() * 512 <= 1 << 20,
        "{} bytes allocated for 612 bytes of data",
        md.blocks() * 512
    );
    let f = std::fs::File::open(&path).unwrap();
    let at = |off: u64, len: usize| {
        let mut v = vec![0u8; len];
        f.read_exact_at(&mut v, off).unwrap();
        v
    };
    assert_eq!(at(0, 512), a);
    assert_eq!(at(512, 4096), vec![0u8; 4096]);
    assert_eq!(at(128 << 20, 100), b);
    assert_eq!(at((128 << 20) + 100, 4096), vec![0u8; 4096]);
    assert_eq!(at(size - 4096, 4096), vec![0u8; 4096]);
    assert!(du(&sb.root()) <= 1 << 20);
}

#[test]
fn a_sparse_file_of_1_tib_is_refused_at_once() {
    let sb = Sandbox::new();
    let tar = sparse_tar("bomb", 1 << 40, &[]);
    let started = std::time::Instant::now();
    let msg = assert_limit(sb.apply(&tar), "max_layer_bytes");
    assert!(msg.contains("1 TiB") && msg.contains("64 GiB"), "{msg}");
    assert!(msg.contains("bomb"), "{msg}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert!(du(sb.dir.path()) < 1 << 20, "{}", du(sb.dir.path()));
}

#[test]
fn cancellation_stops_a_sparse_file_mid_hole() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let sb = Sandbox::new();
    // Within raised limits, 1 TiB of holes is minutes of reading zeros.
    let limits = UnpackLimits {
        max_layer_bytes: 2 << 40,
        ..UnpackLimits::default()
    };
    let tar = sparse_tar("bomb", 1 << 40, &[]);
    let flag = Arc::new(AtomicBool::new(false));
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            flag.store(true, Ordering::Relaxed);
        })
    };
    let started = std::time::Instant::now();
    let r = sb.apply_with(&tar, &limits, &|| flag.load(Ordering::Relaxed));
    setter.join().unwrap();
    assert!(matches!(r, Err(UnpackError::Cancelled)), "{r:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(du(sb.dir.path()) < 1 << 20, "{}", du(sb.dir.path()));
}

#[test]
fn pax_sparse_files_are_refused() {
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([
        ("GNU.sparse.major", b"1".as_slice()),
        ("GNU.sparse.minor", b"0"),
        ("GNU.sparse.name", b"bomb"),
        ("GNU.sparse.realsize", b"1099511627776"),
    ])
    .unwrap();
    let map = b"1\n1099511627775\n1\n";
    let mut data = map.to_vec();
    data.resize(512, 0);
    data.push(b'x');
    let mut h = header(tar::EntryType::Regular, data.len() as u64, 0o644);
    h.set_path("GNUSparseFile.0/bomb").unwrap();
    h.set_cksum();
    b.append(&h, &data[..]).unwrap();
    let sb = Sandbox::new();
    match sb.apply(&b.into_inner().unwrap()) {
        Err(UnpackError::Hostile { reason, .. }) => {
            assert!(reason.contains("PAX sparse"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn entry_headers_are_bounded() {
    // A 2 MiB PAX record (the tar reader would hold it in memory).
    let big = vec![b'v'; 2 << 20];
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("SCHILY.xattr.user.big", big.as_slice())])
        .unwrap();
    let mut h = header(tar::EntryType::Regular, 0, 0o644);
    h.set_path("f").unwrap();
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let sb = Sandbox::new();
    assert_limit(sb.apply(&b.into_inner().unwrap()), "max_entry_header_bytes");

    // A 2 MiB GNU long name.
    let name = "d/".repeat(1 << 20);
    let mut h = header(tar::EntryType::GNULongName, name.len() as u64 + 1, 0o644);
    set_raw_path(&mut h, "././@LongLink");
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    let mut data = name.into_bytes();
    data.push(0);
    b.append(&h, &data[..]).unwrap();
    let mut h = header(tar::EntryType::Regular, 0, 0o644);
    set_raw_path(&mut h, "short");
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let sb = Sandbox::new();
    assert_limit(sb.apply(&b.into_inner().unwrap()), "max_entry_header_bytes");
}

#[test]
fn paths_longer_than_path_max_are_refused() {
    let deep = format!("{}f", "d/".repeat(3000));
    let mut b = tar::Builder::new(Vec::new());
    let mut h = header(tar::EntryType::Regular, 1, 0o644);
    b.append_data(&mut h, &deep, &b"x"[..]).unwrap();
    let sb = Sandbox::new();
    match sb.apply(&b.into_inner().unwrap()) {
        Err(UnpackError::Hostile { reason, .. }) => {
            assert!(reason.contains("longer than 4096"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!sb.root().join("d").exists());
}

#[test]
fn entries_sizes_and_the_stream_are_bounded() {
    let small = UnpackLimits {
        max_layer_bytes: 1 << 20,
        max_entries: 10,
        ..UnpackLimits::default()
    };
    let names: Vec<String> = (0..11).map(|i| format!("f{i}")).collect();
    let files: Vec<E<'_>> = names.iter().map(|n| E::File(n, b"x")).collect();
    let sb = Sandbox::new();
    assert_limit(
        sb.apply_with(&build(&files), &small, &|| false),
        "max_entries",
    );
    // Ten are fine.
    let sb = Sandbox::new();
    sb.apply_with(&build(&files[..10]), &small, &|| false)
        .unwrap();

    // One file bigger than the layer may be.
    let big = vec![1u8; (1 << 20) + 1];
    let sb = Sandbox::new();
    let msg = assert_limit(
        sb.apply_with(&build(&[E::File("big", &big)]), &small, &|| false),
        "max_layer_bytes",
    );
    assert!(msg.contains("1 MiB"), "{msg}");
    assert!(du(&sb.root()) < 64 << 10);

    // An absurd size in a header that carries no data: refused before
    // anything is read.
    let mut h = header(tar::EntryType::Symlink, 1 << 50, 0o777);
    set_raw_path(&mut h, "link");
    set_raw_link(&mut h, "target");
    h.set_cksum();
    let mut tar = h.as_bytes().to_vec();
    tar.extend_from_slice(&[0u8; 1024]);
    let sb = Sandbox::new();
    assert_limit(sb.apply(&tar), "max_layer_bytes");

    // Zeros after the end of the archive count too.
    let mut tar = build(&[E::File("a", b"a")]);
    tar.resize(tar.len() + (2 << 20), 0);
    let sb = Sandbox::new();
    assert_limit(
        sb.apply_with(&tar, &small, &|| false),
        "uncompressed layer is larger",
    );
}

/// A tmpfs of 8 MiB filled up to 256 KiB free (less than 5% of it);
/// unmounted on drop. Fails the test when not root.
pub(crate) struct FullFs {
    pub(crate) dir: tempfile::TempDir,
}

impl FullFs {
    pub(crate) fn new() -> FullFs {
        assert!(is_root(), "needs root: mounting a tmpfs");
        let dir = tempfile::tempdir().unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=8m"),
        )
        .unwrap();
        let fs = FullFs { dir };
        std::fs::write(
            fs.dir.path().join("filler"),
            vec![1u8; (8 << 20) - (256 << 10)],
        )
        .unwrap();
        fs
    }
}

impl Drop for FullFs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn the_free_space_reserve_is_kept() {
    let fs = FullFs::new();
    let root = fs.dir.path().join("root");
    let apply = |tar: &[u8], limits: &UnpackLimits| {
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir(&root).unwrap();
        let mut applier = Applier::new(&root, is_root()).unwrap();
        applier.apply_stream(&mut &tar[..], limits, &|| false)
    };
    let tar = build(&[E::File("a", b"a")]);
    let limits = UnpackLimits::default();
    assert_limit(apply(&tar, &limits), "min_free_bytes");
    // Sparse data too.
    let sparse = sparse_tar("s", 1 << 20, &[(4096, b"x")]);
    assert_limit(apply(&sparse, &limits), "min_free_bytes");
    // 0 turns it off.
    let off = UnpackLimits {
        min_free_bytes: 0,
        ..limits
    };
    apply(&tar, &off).unwrap();
    // With room, the default is fine.
    std::fs::remove_file(fs.dir.path().join("filler")).unwrap();
    apply(&tar, &limits).unwrap();
    apply(&sparse, &limits).unwrap();
}

#[test]
#[ignore = "needs root: hack/test.sh runs it (--include-ignored)"]
fn the_inode_reserve_is_kept() {
    assert!(is_root(), "needs root: mounting a tmpfs");
    let dir = tempfile::tempdir().unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        dir.path(),
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=8m,nr_inodes=1000"),
    )
    .unwrap();
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _umount = Umount(dir.path());
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let filler = dir.path().join("filler");
    std::fs::create_dir(&filler).unwrap();
    for i in 0..970 {
        std::fs::write(filler.join(i.to_string()), b"").unwrap();
    }
    let tar = build(&[E::File("a", b"a")]);
    let mut applier = Applier::new(&root, is_root()).unwrap();
    let r = applier.apply_stream(&mut &tar[..], &UnpackLimits::default(), &|| false);
    assert_limit(r, "inodes");
    std::fs::remove_dir_all(&filler).unwrap();
    let mut applier = Applier::new(&root, is_root()).unwrap();
    applier
        .apply_stream(&mut &tar[..], &UnpackLimits::default(), &|| false)
        .unwrap();
}

#[test]
fn limits_are_validated() {
    assert!(UnpackLimits::default().validate().is_ok());
    for bad in [
        UnpackLimits {
            max_entries: 0,
            ..UnpackLimits::default()
        },
        UnpackLimits {
            max_layer_bytes: 0,
            ..UnpackLimits::default()
        },
        UnpackLimits {
            max_entry_header_bytes: 512,
            ..UnpackLimits::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn device_nodes_are_refused_without_root() {
    let mut h = header(tar::EntryType::Block, 0, 0o600);
    h.set_device_major(8).unwrap();
    h.set_device_minor(0).unwrap();
    set_raw_path(&mut h, "sda");
    h.set_cksum();
    let mut tar = h.as_bytes().to_vec();
    tar.extend_from_slice(&[0u8; 1024]);
    let sb = Sandbox::new();
    let mut applier = Applier::new(&sb.root(), false).unwrap();
    let r = applier.apply_stream(&mut &tar[..], &UnpackLimits::default(), &|| false);
    assert_hostile(r);
    assert!(std::fs::symlink_metadata(sb.root().join("sda")).is_err());
}
