//! The Qdrant calls the store makes, as a small trait: the real client implements it, and unit
//! tests check the store's requests against a mock (`MockQdrantApi`) without a server.

use async_trait::async_trait;
use qdrant_client::qdrant::{
    CountPoints, CreateCollection, CreateFieldIndexCollection, CreateVectorNameRequest, DeletePoints,
    DeleteVectorNameRequest, GetCollectionInfoResponse, GetPoints, QueryPoints, RetrievedPoint, ScoredPoint,
    ScrollPoints, UpdatePointVectors, UpsertPoints,
};
use qdrant_client::{Qdrant, QdrantError};

pub type ApiResult<T> = Result<T, QdrantError>;

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
    async fn scroll(&self, request: ScrollPoints) -> ApiResult<Vec<RetrievedPoint>>;
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
    async fn scroll(&self, request: ScrollPoints) -> ApiResult<Vec<RetrievedPoint>> {
        Ok(Qdrant::scroll(self, request).await?.result)
    }
    async fn query(&self, request: QueryPoints) -> ApiResult<Vec<ScoredPoint>> {
        Ok(Qdrant::query(self, request).await?.result)
    }
}
