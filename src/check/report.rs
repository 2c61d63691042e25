//! The report of `berth check`: its lines, their status, whether berth can
//! start, and the text printed.

/// How one prerequisite stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Info,
    Warn,
    Missing,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Missing => "missing",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub status: Status,
    /// What was checked, e.g. `runtime runc`.
    pub name: String,
    /// What was found.
    pub detail: String,
    /// How to fix it, when it is not ok.
    pub fix: Option<String>,
}

pub(super) fn item(status: Status, name: impl Into<String>, detail: impl Into<String>) -> Item {
    Item {
        status,
        name: name.into(),
        detail: detail.into(),
        fix: None,
    }
}

impl Item {
    pub(super) fn fix(mut self, fix: impl Into<String>) -> Item {
        self.fix = Some(fix.into());
        self
    }
}

/// The line for a configuration that does not validate.
pub fn config_item(error: &str) -> Item {
    item(Status::Missing, "config", error.to_string())
        .fix("correct the key in the file named (berth config show prints what is in effect)")
}

/// Whether berth can start: nothing required is missing.
pub fn passed(items: &[Item]) -> bool {
    items.iter().all(|i| i.status != Status::Missing)
}

/// The report as printed by `berth check`.
pub fn render(items: &[Item]) -> String {
    let width = items.iter().map(|i| i.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for i in items {
        out.push_str(&format!(
            "{:<8} {:<width$}  {}\n",
            i.status.label(),
            i.name,
            i.detail
        ));
        if let Some(fix) = &i.fix {
            out.push_str(&format!("{:<8} {:<width$}  fix: {fix}\n", "", ""));
        }
    }
    let count = |s| items.iter().filter(|i| i.status == s).count();
    out.push_str(&format!(
        "{} ok, {} info, {} warnings, {} missing\n",
        count(Status::Ok),
        count(Status::Info),
        count(Status::Warn),
        count(Status::Missing)
    ));
    out
}
