//! Event subscription masks, as NRI encodes them: bit `e - 1` for event `e`.

use crate::api::Event;

/// A set of subscribed events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventMask(pub i32);

/// Every event a plugin may subscribe to (RunPodSandbox ..= Validate...).
pub const VALID_EVENTS: EventMask = EventMask((1 << (Event::LAST as i32 - 1)) - 1);

impl EventMask {
    /// Whether `e` is in the set.
    pub fn is_set(self, e: Event) -> bool {
        let n = e as i32;
        n > 0 && self.0 & (1 << (n - 1)) != 0
    }

    /// The set with `e` added.
    pub fn with(self, e: Event) -> Self {
        EventMask(self.0 | (1 << (e as i32 - 1)))
    }

    /// The events in the set, in enum order.
    pub fn events(self) -> Vec<Event> {
        (1..Event::LAST as i32)
            .filter_map(<Event as protobuf::Enum>::from_i32)
            .filter(|e| self.is_set(*e))
            .collect()
    }
}

/// NRI's name of an event (as in `EventPrettyNames`).
pub fn event_name(e: Event) -> &'static str {
    match e {
        Event::RUN_POD_SANDBOX => "RunPodSandbox",
        Event::UPDATE_POD_SANDBOX => "UpdatePodSandbox",
        Event::POST_UPDATE_POD_SANDBOX => "PostUpdatePodSandbox",
        Event::STOP_POD_SANDBOX => "StopPodSandbox",
        Event::REMOVE_POD_SANDBOX => "RemovePodSandbox",
        Event::CREATE_CONTAINER => "CreateContainer",
        Event::POST_CREATE_CONTAINER => "PostCreateContainer",
        Event::START_CONTAINER => "StartContainer",
        Event::POST_START_CONTAINER => "PostStartContainer",
        Event::UPDATE_CONTAINER => "UpdateContainer",
        Event::POST_UPDATE_CONTAINER => "PostUpdateContainer",
        Event::STOP_CONTAINER => "StopContainer",
        Event::REMOVE_CONTAINER => "RemoveContainer",
        Event::VALIDATE_CONTAINER_ADJUSTMENT => "ValidateContainerAdjustment",
        Event::UNKNOWN | Event::LAST => "Unknown",
    }
}

/// Parses an event name (NRI's pretty name, case-insensitive).
pub fn parse_event(name: &str) -> Option<Event> {
    (1..Event::LAST as i32)
        .filter_map(<Event as protobuf::Enum>::from_i32)
        .find(|e| event_name(*e).eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_bits_match_nri() {
        let m = EventMask::default()
            .with(Event::RUN_POD_SANDBOX)
            .with(Event::CREATE_CONTAINER);
        assert_eq!(m.0, 0b1001);
        assert!(m.is_set(Event::CREATE_CONTAINER));
        assert!(!m.is_set(Event::STOP_CONTAINER));
        assert_eq!(VALID_EVENTS.0, 0x3fff);
        assert_eq!(
            m.events(),
            vec![Event::RUN_POD_SANDBOX, Event::CREATE_CONTAINER]
        );
        assert_eq!(
            parse_event("createcontainer"),
            Some(Event::CREATE_CONTAINER)
        );
    }
}
