//! What a list answer is made of: the encoded bytes of each field of its
//! entries, summed over them.

use cri_api::v1;

/// A field's name and a copy of an entry with only that field.
type Field<T> = (&'static str, fn(&T) -> T);

/// Encoded bytes of each field of the entries of a ListContainers answer,
/// summed over the entries (each field with its tag and length prefix):
/// which fields make one runtime's answer larger than another's.
pub fn container_field_bytes(list: &v1::ListContainersResponse) -> Vec<(&'static str, usize)> {
    use prost::Message;
    type C = v1::Container;
    let fields: [Field<C>; 10] = [
        ("id", |c| C {
            id: c.id.clone(),
            ..C::default()
        }),
        ("pod_sandbox_id", |c| C {
            pod_sandbox_id: c.pod_sandbox_id.clone(),
            ..C::default()
        }),
        ("metadata", |c| C {
            metadata: c.metadata.clone(),
            ..C::default()
        }),
        ("image", |c| C {
            image: c.image.clone(),
            ..C::default()
        }),
        ("image_ref", |c| C {
            image_ref: c.image_ref.clone(),
            ..C::default()
        }),
        ("image_id", |c| C {
            image_id: c.image_id.clone(),
            ..C::default()
        }),
        ("state", |c| C {
            state: c.state,
            ..C::default()
        }),
        ("created_at", |c| C {
            created_at: c.created_at,
            ..C::default()
        }),
        ("labels", |c| C {
            labels: c.labels.clone(),
            ..C::default()
        }),
        ("annotations", |c| C {
            annotations: c.annotations.clone(),
            ..C::default()
        }),
    ];
    field_bytes(&fields, &list.containers, list.encoded_len())
}

/// [`container_field_bytes`] for a ListPodSandbox answer.
pub fn sandbox_field_bytes(list: &v1::ListPodSandboxResponse) -> Vec<(&'static str, usize)> {
    use prost::Message;
    type P = v1::PodSandbox;
    let fields: [Field<P>; 7] = [
        ("id", |p| P {
            id: p.id.clone(),
            ..P::default()
        }),
        ("metadata", |p| P {
            metadata: p.metadata.clone(),
            ..P::default()
        }),
        ("state", |p| P {
            state: p.state,
            ..P::default()
        }),
        ("created_at", |p| P {
            created_at: p.created_at,
            ..P::default()
        }),
        ("labels", |p| P {
            labels: p.labels.clone(),
            ..P::default()
        }),
        ("annotations", |p| P {
            annotations: p.annotations.clone(),
            ..P::default()
        }),
        ("runtime_handler", |p| P {
            runtime_handler: p.runtime_handler.clone(),
            ..P::default()
        }),
    ];
    field_bytes(&fields, &list.items, list.encoded_len())
}

/// Each field's encoded bytes summed over `entries`, then the `whole`
/// answer's.
fn field_bytes<T: prost::Message>(
    fields: &[Field<T>],
    entries: &[T],
    whole: usize,
) -> Vec<(&'static str, usize)> {
    let mut out: Vec<(&'static str, usize)> = fields
        .iter()
        .map(|(name, only)| (*name, entries.iter().map(|e| only(e).encoded_len()).sum()))
        .collect();
    out.push(("whole answer", whole));
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn answer_fields_add_up_to_the_answer() {
        let c = v1::Container {
            id: "a".repeat(64),
            image_id: "sha256:".to_string() + &"b".repeat(64),
            labels: [("k".to_string(), "v".to_string())].into(),
            state: 1,
            ..Default::default()
        };
        let list = v1::ListContainersResponse {
            containers: vec![c.clone(), c],
        };
        let fields: HashMap<_, _> = container_field_bytes(&list).into_iter().collect();
        // A tag byte, a length byte, the 71 bytes: twice.
        assert_eq!(fields["image_id"], 2 * 73);
        assert_eq!(fields["id"], 2 * 66);
        assert_eq!(fields["state"], 2 * 2);
        assert_eq!(fields["annotations"], 0);
        let parts: usize = fields
            .iter()
            .filter(|(k, _)| **k != "whole answer")
            .map(|(_, v)| v)
            .sum();
        // Each entry adds its own tag and length prefix (1 + 2 bytes: an
        // entry is over 127 bytes).
        assert_eq!(parts + 2 * 3, fields["whole answer"]);
    }
}
