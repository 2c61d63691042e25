//! The undo stack of one creation in the core (RunPodSandbox,
//! CreateContainer): each step registers how to undo itself in one call,
//! an async closure over the core, the new object's id and what else it
//! needs, whose error stays an [`Error`]. The order and the kinds of steps
//! are [`Undo`]'s.

use std::future::Future;
use std::sync::Arc;

use super::Core;
use crate::error::Error;
use crate::undo::Undo;

/// An undo step: an async closure over the core, the id of the object
/// being made and the step's own arguments `A` (what it gives back).
pub(super) trait Step<A>: FnOnce(Arc<Core>, String, A) -> Self::Undone {
    /// The undoing itself, run on [`Rollback::unwind`].
    type Undone: Future<Output = Result<(), Error>> + Send + 'static;
}

impl<A, F, U> Step<A> for F
where
    F: FnOnce(Arc<Core>, String, A) -> U,
    U: Future<Output = Result<(), Error>> + Send + 'static,
{
    type Undone = U;
}

/// An [`Undo`] stack bound to the core and to the id of the object being
/// made.
pub(super) struct Rollback {
    core: Arc<Core>,
    id: String,
    undo: Undo,
}

impl Rollback {
    /// An empty stack for making object `id`.
    pub fn new(core: &Arc<Core>, id: &str) -> Rollback {
        Rollback {
            core: core.clone(),
            id: id.to_string(),
            undo: Undo::new(),
        }
    }

    /// Registers how to give back what the step about to run allocates:
    /// `step(core, id, args)`, run only on [`Rollback::unwind`].
    pub fn push<A>(&mut self, what: &'static str, args: A, step: impl Step<A>) {
        let step = step(self.core.clone(), self.id.clone(), args);
        self.undo.push(what, step);
    }

    /// Registers how to forget the object (its record, its name), as
    /// [`Rollback::push`]; skipped when a later step's undo failed (see
    /// [`Undo::push_forget`]).
    pub fn push_forget<A>(&mut self, what: &'static str, args: A, step: impl Step<A>) {
        let step = step(self.core.clone(), self.id.clone(), args);
        self.undo.push_forget(what, step);
    }

    /// Success: nothing is undone.
    pub fn disarm(self) {
        self.undo.disarm();
    }

    /// Failure: every step undone, newest first (see [`Undo::unwind`]).
    pub async fn unwind(self, error: Error) -> Error {
        self.undo.unwind(error).await
    }
}
