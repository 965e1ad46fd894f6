//! The Qdrant calls the store makes, as a small trait: the real client implements it, [`Nodes`]
//! spreads it over the nodes of a cluster (a call that cannot reach one node goes to the next),
//! and unit tests check the store's requests against a mock (`MockQdrantApi`) without a server.

use async_trait::async_trait;
use qdrant_client::qdrant::{
    CountPoints, CreateCollection, CreateFieldIndexCollection, CreateVectorNameRequest, DeletePayloadPoints,
    DeletePoints, DeleteVectorNameRequest, GetCollectionInfoResponse, GetPoints, QueryPoints, RetrievedPoint,
    ScoredPoint, ScrollPoints, SetPayloadPoints, UpdatePointVectors, UpsertPoints,
};
use qdrant_client::{Qdrant, QdrantError};
use std::sync::atomic::{AtomicUsize, Ordering};
use tonic::Code;

pub type ApiResult<T> = Result<T, QdrantError>;

/// One page of a scroll: its points, and where the next page starts (none after the last).
#[derive(Debug, Clone, Default)]
pub struct ScrollPage {
    pub points: Vec<RetrievedPoint>,
    pub next: Option<qdrant_client::qdrant::PointId>,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait QdrantApi: Send + Sync {
    async fn collection_exists(&self, collection: String) -> ApiResult<bool>;
    async fn collection_info(&self, collection: String) -> ApiResult<GetCollectionInfoResponse>;
    async fn create_collection(&self, request: CreateCollection) -> ApiResult<()>;
    async fn create_field_index(&self, request: CreateFieldIndexCollection) -> ApiResult<()>;
    async fn create_vector_name(&self, request: CreateVectorNameRequest) -> ApiResult<()>;
    async fn delete_vector_name(&self, request: DeleteVectorNameRequest) -> ApiResult<()>;
    async fn upsert_points(&self, request: UpsertPoints) -> ApiResult<()>;
    async fn delete_points(&self, request: DeletePoints) -> ApiResult<()>;
    async fn update_vectors(&self, request: UpdatePointVectors) -> ApiResult<()>;
    async fn count(&self, request: CountPoints) -> ApiResult<u64>;
    async fn get_points(&self, request: GetPoints) -> ApiResult<Vec<RetrievedPoint>>;
    async fn scroll(&self, request: ScrollPoints) -> ApiResult<ScrollPage>;
    async fn set_payload(&self, request: SetPayloadPoints) -> ApiResult<()>;
    async fn delete_payload(&self, request: DeletePayloadPoints) -> ApiResult<()>;
    async fn query(&self, request: QueryPoints) -> ApiResult<Vec<ScoredPoint>>;
}

#[async_trait]
impl QdrantApi for Qdrant {
    async fn collection_exists(&self, collection: String) -> ApiResult<bool> {
        Qdrant::collection_exists(self, collection).await
    }
    async fn collection_info(&self, collection: String) -> ApiResult<GetCollectionInfoResponse> {
        Qdrant::collection_info(self, collection).await
    }
    async fn create_collection(&self, request: CreateCollection) -> ApiResult<()> {
        Qdrant::create_collection(self, request).await.map(drop)
    }
    async fn create_field_index(&self, request: CreateFieldIndexCollection) -> ApiResult<()> {
        Qdrant::create_field_index(self, request).await.map(drop)
    }
    async fn create_vector_name(&self, request: CreateVectorNameRequest) -> ApiResult<()> {
        Qdrant::create_vector_name(self, request).await.map(drop)
    }
    async fn delete_vector_name(&self, request: DeleteVectorNameRequest) -> ApiResult<()> {
        Qdrant::delete_vector_name(self, request).await.map(drop)
    }
    async fn upsert_points(&self, request: UpsertPoints) -> ApiResult<()> {
        Qdrant::upsert_points(self, request).await.map(drop)
    }
    async fn delete_points(&self, request: DeletePoints) -> ApiResult<()> {
        Qdrant::delete_points(self, request).await.map(drop)
    }
    async fn update_vectors(&self, request: UpdatePointVectors) -> ApiResult<()> {
        Qdrant::update_vectors(self, request).await.map(drop)
    }
    async fn count(&self, request: CountPoints) -> ApiResult<u64> {
        Ok(Qdrant::count(self, request).await?.result.map_or(0, |r| r.count))
    }
    async fn get_points(&self, request: GetPoints) -> ApiResult<Vec<RetrievedPoint>> {
        Ok(Qdrant::get_points(self, request).await?.result)
    }
    async fn scroll(&self, request: ScrollPoints) -> ApiResult<ScrollPage> {
        let page = Qdrant::scroll(self, request).await?;
        Ok(ScrollPage { points: page.result, next: page.next_page_offset })
    }
    async fn set_payload(&self, request: SetPayloadPoints) -> ApiResult<()> {
        Qdrant::set_payload(self, request).await.map(drop)
    }
    async fn delete_payload(&self, request: DeletePayloadPoints) -> ApiResult<()> {
        Qdrant::delete_payload(self, request).await.map(drop)
    }
    async fn query(&self, request: QueryPoints) -> ApiResult<Vec<ScoredPoint>> {
        Ok(Qdrant::query(self, request).await?.result)
    }
}

/// The nodes of one cluster, any of which serves every call (Qdrant forwards to the shards'
/// replicas itself). Calls go to the node that answered last; a call that cannot reach it is
/// sent to the next node, so a client keeps working while the node it spoke to is down. Every
/// call the store makes can be repeated safely: points are written and deleted by id.
pub struct Nodes {
    nodes: Vec<Qdrant>,
    current: AtomicUsize,
}

impl Nodes {
    pub fn new(nodes: Vec<Qdrant>) -> Self {
        assert!(!nodes.is_empty(), "at least one Qdrant node");
        Nodes { nodes, current: AtomicUsize::new(0) }
    }
}

/// Whether the call never reached a working server (so another node may answer it).
pub fn unreachable(e: &QdrantError) -> bool {
    let QdrantError::ResponseError { status } = e else { return false };
    match status.code() {
        Code::Unavailable => true,
        Code::Internal => status.message().starts_with("Failed to connect"),
        Code::Unknown => status.message().contains("transport error"),
        // The connection was lost in the middle of the call (the node went away); every call
        // the store makes can be repeated.
        Code::Cancelled => status.message().contains("operation was canceled"),
        _ => false,
    }
}

/// Whether Qdrant asks for the call to be repeated: a replica was not active (just after a
/// collection was created, or while a lost node is being marked dead), so a write may have
/// reached only some replicas, or a read found the replica it chose gone (a node that just
/// came back).
pub fn asks_to_retry(e: &QdrantError) -> bool {
    let QdrantError::ResponseError { status } = e else { return false };
    let message = status.message();
    message.contains("Please retry") || message.contains("read operations failed")
}

/// Pauses before repeating a call Qdrant asked to repeat: 3.1 s in all.
const RETRY_PAUSES_MS: [u64; 5] = [100, 200, 400, 800, 1600];

/// Runs `$call` (an expression over `$node`) on the current node, then on each other node
/// while the nodes tried were unreachable; the node that answered becomes the current one. A
/// call Qdrant asks to repeat is repeated after a pause.
macro_rules! on_nodes {
    ($self:ident, $node:ident => $call:expr) => {{
        let count = $self.nodes.len();
        let mut first = $self.current.load(Ordering::Relaxed);
        let (mut tried, mut retried) = (0, 0);
        loop {
            let index = (first + tried) % count;
            let $node = &$self.nodes[index];
            match $call.await {
                Err(e) if unreachable(&e) && tried + 1 < count => {
                    tracing::warn!(node = index, error = %e, "Qdrant node unreachable; trying the next");
                    tried += 1;
                }
                Err(e) if asks_to_retry(&e) && retried < RETRY_PAUSES_MS.len() => {
                    tracing::warn!(node = index, error = %e, "Qdrant asked to retry");
                    tokio::time::sleep(std::time::Duration::from_millis(RETRY_PAUSES_MS[retried])).await;
                    (first, tried) = (index, 0);
                    retried += 1;
                }
                answer => {
                    if index != first || retried > 0 {
                        $self.current.store(index, Ordering::Relaxed);
                    }
                    break answer;
                }
            }
        }
    }};
}

#[async_trait]
impl QdrantApi for Nodes {
    async fn collection_exists(&self, collection: String) -> ApiResult<bool> {
        on_nodes!(self, n => QdrantApi::collection_exists(n, collection.clone()))
    }
    async fn collection_info(&self, collection: String) -> ApiResult<GetCollectionInfoResponse> {
        on_nodes!(self, n => QdrantApi::collection_info(n, collection.clone()))
    }
    async fn create_collection(&self, request: CreateCollection) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::create_collection(n, request.clone()))
    }
    async fn create_field_index(&self, request: CreateFieldIndexCollection) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::create_field_index(n, request.clone()))
    }
    async fn create_vector_name(&self, request: CreateVectorNameRequest) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::create_vector_name(n, request.clone()))
    }
    async fn delete_vector_name(&self, request: DeleteVectorNameRequest) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::delete_vector_name(n, request.clone()))
    }
    async fn upsert_points(&self, request: UpsertPoints) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::upsert_points(n, request.clone()))
    }
    async fn delete_points(&self, request: DeletePoints) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::delete_points(n, request.clone()))
    }
    async fn update_vectors(&self, request: UpdatePointVectors) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::update_vectors(n, request.clone()))
    }
    async fn count(&self, request: CountPoints) -> ApiResult<u64> {
        on_nodes!(self, n => QdrantApi::count(n, request.clone()))
    }
    async fn get_points(&self, request: GetPoints) -> ApiResult<Vec<RetrievedPoint>> {
        on_nodes!(self, n => QdrantApi::get_points(n, request.clone()))
    }
    async fn scroll(&self, request: ScrollPoints) -> ApiResult<ScrollPage> {
        on_nodes!(self, n => QdrantApi::scroll(n, request.clone()))
    }
    async fn set_payload(&self, request: SetPayloadPoints) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::set_payload(n, request.clone()))
    }
    async fn delete_payload(&self, request: DeletePayloadPoints) -> ApiResult<()> {
        on_nodes!(self, n => QdrantApi::delete_payload(n, request.clone()))
    }
    async fn query(&self, request: QueryPoints) -> ApiResult<Vec<ScoredPoint>> {
        on_nodes!(self, n => QdrantApi::query(n, request.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: tonic::Status) -> QdrantError {
        QdrantError::ResponseError { status }
    }

    #[test]
    fn a_lost_connection_goes_to_the_next_node_and_a_refusal_does_not() {
        assert!(unreachable(&error(tonic::Status::unavailable("tcp connect error: Connection refused"))));
        assert!(unreachable(&error(tonic::Status::internal("Failed to connect to http://127.0.0.1:1"))));
        assert!(unreachable(&error(tonic::Status::cancelled("operation was canceled: connection closed"))));
        assert!(!unreachable(&error(tonic::Status::cancelled("Timeout expired"))));
        assert!(!unreachable(&error(tonic::Status::invalid_argument("Wrong input: Vector dimension error"))));
        assert!(!unreachable(&error(tonic::Status::not_found("Collection `x` doesn't exist!"))));
    }

    #[test]
    fn qdrant_s_requests_to_repeat_are_recognised() {
        let partial = "Service internal error: Failed to apply operation to at least one `Active` replica. \
                       Consistency of this update is not guaranteed. Please retry.";
        assert!(asks_to_retry(&error(tonic::Status::internal(partial))));
        assert!(asks_to_retry(&error(tonic::Status::internal(
            "Service internal error: 1 of 1 read operations failed:"
        ))));
        assert!(!asks_to_retry(&error(tonic::Status::internal("Service internal error: disk full"))));
    }
}
