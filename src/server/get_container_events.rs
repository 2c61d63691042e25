//! RuntimeService.GetContainerEvents: a subscription to the event hub
//! (`crate::events`).

use cri_api::v1;

use super::{BoxStream, Cri};
use crate::error::Error;

impl Cri {
    pub async fn get_container_events(
        &self,
        _req: v1::GetEventsRequest,
    ) -> Result<BoxStream<v1::ContainerEventResponse>, Error> {
        Ok(self.events.subscribe())
    }
}
