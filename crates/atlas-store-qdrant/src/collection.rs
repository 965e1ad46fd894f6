//! The space's Qdrant collection: naming, creation with vectors and payload indexes, checks of
//! an existing one, and the calls the store makes, with errors that name the collection.

use crate::api::QdrantApi;
use crate::payload::field;
use crate::{QdrantOptions, Quantization};
use atlas_domain::ports::EmbeddingModel;
use atlas_domain::{AtlasError, MemoryId, Result};
use qdrant_client::QdrantError;
use qdrant_client::qdrant::vectors_config::Config;
use qdrant_client::qdrant::{
    Condition, CountPointsBuilder, CreateCollectionBuilder, CreateFieldIndexCollectionBuilder,
    CreateVectorNameRequestBuilder, DeletePointsBuilder, DeleteVectorNameRequestBuilder,
    DenseVectorCreationConfigBuilder, Distance, FieldType, Filter, Modifier, PointId, PointStruct, PointsIdsList,
    RetrievedPoint, ScalarQuantizationBuilder, ScrollPointsBuilder, SparseVectorParamsBuilder,
    SparseVectorsConfigBuilder, UpsertPointsBuilder, VectorParamsBuilder, VectorsConfigBuilder, WriteOrdering,
    WriteOrderingType,
};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tonic::Code;

/// Points per scroll request.
const SCROLL_PAGE: u32 = 1000;

/// The sparse vector carrying BM25 term weights.
pub const TEXT_VECTOR: &str = "text";

/// The dense vector of a model: named after it, so vectors of two models never mix.
pub fn dense_vector_name(model: &EmbeddingModel) -> String {
    let name: String = model
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c.to_ascii_lowercase() } else { '-' })
        .collect();
    format!("dense-{name}-{}", model.dimension)
}

/// `{prefix}_{file stem}_{8 hex digits}`: readable, and unique per space even for two files
/// with one name (the digits come from the path and the time the space was created).
pub fn name_for(prefix: &str, space: &Path) -> String {
    let stem: String = space
        .file_stem()
        .map(|s| s.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect())
        .unwrap_or_default();
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{}|{created}|{}",
        std::path::absolute(space).unwrap_or(space.to_path_buf()).display(),
        std::process::id()
    );
    let hash = seed.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("{prefix}_{stem}_{hash:08x}")
}

/// `{prefix}_{space}`: the collection of a space named on the server. Names are letters,
/// digits, `-` and `_` (1 to 64), so that two names never share a collection.
pub fn name_of_space(prefix: &str, space: &str) -> Result<String> {
    let fine = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if space.is_empty() || space.len() > 64 || !space.chars().all(fine) {
        return Err(AtlasError::invalid(
            "qdrant.space (--space)",
            format!("{space:?} is not a space name: use 1 to 64 letters, digits, '-' and '_'"),
        ));
    }
    Ok(format!("{prefix}_{space}"))
}

/// What went wrong, in the user's terms.
pub fn describe(url: &str, collection: &str, op: &str, e: &QdrantError) -> AtlasError {
    let status = match e {
        QdrantError::ResponseError { status } => status,
        QdrantError::ResourceExhaustedError { retry_after_seconds, .. } => {
            return AtlasError::Busy(format!(
                "Qdrant at {url} is rate limiting ({op} on collection {collection}); retry after {retry_after_seconds} s"
            ));
        }
        other => return AtlasError::Storage(format!("Qdrant at {url}, collection {collection}: {op}: {other}")),
    };
    let message = status.message();
    match status.code() {
        Code::Unauthenticated | Code::PermissionDenied => AtlasError::Config(format!(
            "Qdrant at {url} refused the API key ({op} on collection {collection}: {message}); set qdrant.api_key or ATLAS_QDRANT_API_KEY"
        )),
        Code::Unavailable => {
            AtlasError::Storage(format!("Qdrant at {url} is unreachable ({op} on collection {collection}): {message}"))
        }
        Code::Internal if message.starts_with("Failed to connect") => {
            AtlasError::Storage(format!("Qdrant at {url} is unreachable ({op} on collection {collection}): {message}"))
        }
        Code::Cancelled | Code::DeadlineExceeded => AtlasError::Storage(format!(
            "Qdrant at {url} timed out ({op} on collection {collection}): {message}; raise qdrant.timeout_ms if the server is busy"
        )),
        code => {
            AtlasError::Storage(format!("Qdrant at {url}, collection {collection}: {op} failed ({code:?}): {message}"))
        }
    }
}

/// The space's two collections: its memories, and what is not a memory (edges, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Memories as points: a sparse text vector, a dense vector per model, payload indexes.
    Memories,
    /// Points without vectors, one `type` each ([`crate::meta`]).
    Meta,
}

/// The meta collection of the memory collection `name`.
pub fn meta_name(name: &str) -> String {
    format!("{name}_meta")
}

pub struct Collection {
    client: Arc<dyn QdrantApi>,
    name: String,
    options: QdrantOptions,
    shape: Shape,
    known_to_exist: AtomicBool,
    /// Keys of points this instance created and that are never deleted (sessions'
    /// bookkeeping): not created again.
    created: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Collection {
    pub fn new(client: Arc<dyn QdrantApi>, name: String, options: QdrantOptions) -> Self {
        Collection {
            client,
            name,
            options,
            shape: Shape::Memories,
            known_to_exist: AtomicBool::new(false),
            created: Default::default(),
        }
    }

    /// The meta collection beside `memories`, on the same server and with the same settings.
    pub fn meta_of(memories: &Collection) -> Self {
        Collection {
            client: Arc::clone(&memories.client),
            name: meta_name(&memories.name),
            options: memories.options.clone(),
            shape: Shape::Meta,
            known_to_exist: AtomicBool::new(false),
            created: Default::default(),
        }
    }

    /// Whether this instance created the never-deleted point `key` already.
    pub fn created_before(&self, key: &str) -> bool {
        self.created.lock().expect("not poisoned").contains(key)
    }

    /// This instance created the never-deleted point `key` (or saw it exist).
    pub fn mark_created(&self, key: String) {
        self.created.lock().expect("not poisoned").insert(key);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn client(&self) -> &dyn QdrantApi {
        self.client.as_ref()
    }

    /// Awaits a client call, naming the server, the collection and the operation on failure.
    pub async fn call<T>(&self, op: &str, fut: impl Future<Output = Result<T, QdrantError>>) -> Result<T> {
        fut.await.map_err(|e| describe(&self.options.url, &self.name, op, &e))
    }

    pub async fn exists(&self) -> Result<bool> {
        if self.known_to_exist.load(Ordering::Acquire) {
            return Ok(true);
        }
        let exists = self.call("check the collection", self.client.collection_exists(self.name.clone())).await?;
        if exists {
            self.await_indexes().await?;
        }
        self.known_to_exist.store(exists, Ordering::Release);
        Ok(exists)
    }

    /// A collection another process (or task) is creating exists a moment before its payload
    /// indexes do, and ordered reads need them: wait (up to 2 s) until the last index created
    /// before `terms` is there. (A collection of an earlier version lacks it until this
    /// version's open adds it: that open waits the 2 s once.)
    async fn await_indexes(&self) -> Result<()> {
        let last = match self.shape {
            Shape::Memories => crate::schema::MEMORY_INDEXES[crate::schema::MEMORY_INDEXES.len() - 2].0,
            Shape::Meta => crate::schema::META_INDEXES[crate::schema::META_INDEXES.len() - 1].0,
        };
        for _ in 0..20 {
            if self.has_index(last).await? {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The dense vectors the collection has: name → (size, distance).
    async fn dense_vectors(&self) -> Result<Vec<(String, u64, Distance)>> {
        let info = self.call("read the collection's settings", self.client.collection_info(self.name.clone())).await?;
        let config = info.result.and_then(|r| r.config).and_then(|c| c.params).and_then(|p| p.vectors_config);
        let params = match config.and_then(|c| c.config) {
            Some(Config::ParamsMap(map)) => map.map.into_iter().collect(),
            Some(Config::Params(p)) => vec![(String::new(), p)],
            None => Vec::new(),
        };
        Ok(params
            .into_iter()
            .map(|(name, p)| (name, p.size, Distance::try_from(p.distance).unwrap_or(Distance::UnknownDistance)))
            .collect())
    }

    /// Checks an existing collection against the model: a vector of the model's name must have
    /// its dimension and cosine distance.
    pub async fn check(&self, model: Option<&EmbeddingModel>) -> Result<()> {
        if !self.exists().await? {
            return Ok(());
        }
        let Some(model) = model else { return Ok(()) };
        let wanted = dense_vector_name(model);
        for (name, size, distance) in self.dense_vectors().await? {
            if name == wanted && (size != model.dimension as u64 || distance != Distance::Cosine) {
                return Err(AtlasError::Storage(format!(
                    "Qdrant collection {} has vector {name:?} with {size} dimensions and {distance:?} distance, \
                     but the store's model {} needs {} dimensions and Cosine; use another collection_prefix or \
                     delete the collection",
                    self.name, model.name, model.dimension
                )));
            }
        }
        Ok(())
    }

    /// Creates the collection if missing (with the model's dense vector when known) and adds the
    /// model's vector to an existing one that lacks it.
    pub async fn ensure(&self, model: Option<&EmbeddingModel>) -> Result<()> {
        if !self.exists().await? {
            match self.create(model).await {
                Ok(()) => {}
                // Created by another process meanwhile: fine, check it like any existing one.
                Err(_) if self.refresh_exists().await? => self.check(model).await?,
                Err(e) => return Err(e),
            }
            self.known_to_exist.store(true, Ordering::Release);
        }
        let (Shape::Memories, Some(model)) = (self.shape, model) else { return Ok(()) };
        self.check(Some(model)).await?;
        let wanted = dense_vector_name(model);
        if !self.dense_vectors().await?.iter().any(|(name, _, _)| *name == wanted) {
            let config = DenseVectorCreationConfigBuilder::new(model.dimension as u64, Distance::Cosine);
            let request = CreateVectorNameRequestBuilder::new(&self.name, &wanted, config).wait(true);
            self.call(
                "add the model's vector (needs Qdrant server 1.18 or newer)",
                self.client.create_vector_name(request.build()),
            )
            .await?;
        }
        Ok(())
    }

    async fn refresh_exists(&self) -> Result<bool> {
        self.known_to_exist.store(false, Ordering::Release);
        self.exists().await
    }

    async fn create(&self, model: Option<&EmbeddingModel>) -> Result<()> {
        let o = &self.options;
        let mut request = CreateCollectionBuilder::new(&self.name);
        if self.shape == Shape::Memories {
            let mut sparse = SparseVectorsConfigBuilder::default();
            sparse.add_named_vector_params(TEXT_VECTOR, SparseVectorParamsBuilder::default().modifier(Modifier::Idf));
            request = request.sparse_vectors_config(sparse);
        }
        if let (Shape::Memories, Some(model)) = (self.shape, model) {
            let mut dense = VectorsConfigBuilder::default();
            dense.add_named_vector_params(
                dense_vector_name(model),
                VectorParamsBuilder::new(model.dimension as u64, Distance::Cosine).on_disk(o.on_disk_vectors),
            );
            request = request.vectors_config(dense);
        }
        if let Some(shards) = o.shards {
            request = request.shard_number(shards);
        }
        if let Some(replicas) = o.replication_factor {
            request = request.replication_factor(replicas);
        }
        if let Some(factor) = o.write_consistency_factor {
            request = request.write_consistency_factor(factor);
        }
        if o.quantization == Quantization::Int8 && self.shape == Shape::Memories {
            request = request.quantization_config(ScalarQuantizationBuilder::default().quantile(0.99).always_ram(true));
        }
        self.call("create the collection", self.client.create_collection(request.build())).await?;
        // In a cluster the node asked may apply the new collection a moment after answering:
        // writes sent before then would find no collection.
        for pause_ms in [0, 50, 100, 200, 400, 800, 1600] {
            tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
            if self.call("check the collection", self.client.collection_exists(self.name.clone())).await? {
                break;
            }
        }
        let indexed: &[(&str, FieldType)] = match self.shape {
            Shape::Memories => &crate::schema::MEMORY_INDEXES,
            Shape::Meta => &crate::schema::META_INDEXES,
        };
        for &(field, kind) in indexed {
            self.index(field, kind).await?;
        }
        tracing::info!(collection = %self.name, url = %o.url, "created Qdrant collection");
        Ok(())
    }

    /// Drops the vectors of a model the space no longer uses.
    pub async fn drop_dense(&self, model: &EmbeddingModel) -> Result<()> {
        let name = dense_vector_name(model);
        if self.dense_vectors().await?.iter().any(|(n, _, _)| *n == name) {
            let request = DeleteVectorNameRequestBuilder::new(&self.name, &name).wait(true);
            self.call("drop the old model's vector", self.client.delete_vector_name(request.build())).await?;
        }
        Ok(())
    }

    pub async fn upsert(&self, points: Vec<PointStruct>) -> Result<()> {
        let request = UpsertPointsBuilder::new(&self.name, points).wait(true);
        self.call("upsert points", self.client.upsert_points(request.build())).await
    }

    pub async fn delete_points(&self, ids: &[MemoryId]) -> Result<()> {
        if ids.is_empty() || !self.exists().await? {
            return Ok(());
        }
        let ids = ids.iter().map(|id| crate::payload::point_id(*id).map(PointId::from)).collect::<Result<Vec<_>>>()?;
        let request = DeletePointsBuilder::new(&self.name).points(PointsIdsList { ids }).wait(true);
        self.call("delete points", self.client.delete_points(request.build())).await
    }

    /// Deletes every point that matches `filter`.
    pub async fn delete_matching(&self, filter: Filter) -> Result<()> {
        if !self.exists().await? {
            return Ok(());
        }
        let request = DeletePointsBuilder::new(&self.name).points(filter).wait(true);
        self.call("delete points", self.client.delete_points(request.build())).await
    }

    /// Every point that matches `filter`, with its payload, page by page in id order.
    pub async fn scroll_matching(&self, filter: Filter) -> Result<Vec<RetrievedPoint>> {
        if !self.exists().await? {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        let mut offset: Option<PointId> = None;
        loop {
            let mut request = ScrollPointsBuilder::new(&self.name)
                .filter(filter.clone())
                .limit(SCROLL_PAGE)
                .with_payload(true)
                .with_vectors(false);
            if let Some(o) = offset.take() {
                request = request.offset(o);
            }
            let page = self.call("scroll", self.client.scroll(request.build())).await?;
            found.extend(page.points);
            match page.next {
                Some(next) => offset = Some(next),
                None => return Ok(found),
            }
        }
    }

    pub async fn count(&self, filter: Option<Filter>) -> Result<u64> {
        let mut request = CountPointsBuilder::new(&self.name).exact(true);
        if let Some(f) = filter {
            request = request.filter(f);
        }
        self.call("count points", self.client.count(request.build())).await
    }

    /// One exact count per filter, all in flight at once.
    pub async fn count_each(&self, filters: Vec<Filter>) -> Result<Vec<u64>> {
        let mut calls = tokio::task::JoinSet::new();
        for (i, filter) in filters.into_iter().enumerate() {
            let client = Arc::clone(&self.client);
            let request = CountPointsBuilder::new(&self.name).exact(true).filter(filter).build();
            calls.spawn(async move { (i, client.count(request).await) });
        }
        let mut counts = vec![0; calls.len()];
        while let Some(done) = calls.join_next().await {
            let (i, count) = done.map_err(|e| AtlasError::Storage(format!("a count task failed: {e}")))?;
            counts[i] = count.map_err(|e| describe(&self.options.url, &self.name, "count points", &e))?;
        }
        Ok(counts)
    }

    /// Whether the collection has a payload index on `field`.
    pub async fn has_index(&self, field: &str) -> Result<bool> {
        let info = self.call("read the collection's settings", self.client.collection_info(self.name.clone())).await?;
        Ok(info.result.is_some_and(|r| r.payload_schema.contains_key(field)))
    }

    /// Indexes `terms` (the last step of upgrading a collection written without it).
    pub async fn index_terms(&self) -> Result<()> {
        self.index(field::TERMS, FieldType::Integer).await
    }

    pub async fn index(&self, field: &str, kind: FieldType) -> Result<()> {
        let request = CreateFieldIndexCollectionBuilder::new(&self.name, field, kind).wait(true);
        self.call(&format!("index payload field {field}"), self.client.create_field_index(request.build())).await
    }

    pub async fn count_with_vector(&self, name: &str) -> Result<u64> {
        self.count(Some(Filter::must([Condition::has_vector(name)]))).await
    }
}

/// The ordering of the space's conditional writes (claims, records, maxima): through the
/// shard's elected leader, so that of two racing conditional writes the second sees the first.
/// `Medium`, not `Strong`: `Strong` goes through a fixed leader and refuses every write while
/// that node is down (measured: the cluster test's writes all failed for the 10 s one node was
/// down); `Medium` follows the leader the remaining nodes elect. During the moment of a leader
/// change two racing conditional writes might both apply: every conditional write here is read
/// back, so the loser still sees that it lost.
pub fn ordered() -> WriteOrdering {
    WriteOrdering { r#type: WriteOrderingType::Medium as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_readable_and_distinct() {
        let a = name_for("atlas", Path::new("/tmp/my agent.db"));
        assert!(a.starts_with("atlas_my_agent_") && a.len() == "atlas_my_agent_".len() + 8, "{a}");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        let model = EmbeddingModel { name: "all-MiniLM-L6-v2 (int8)".into(), dimension: 384 };
        assert_eq!(dense_vector_name(&model), "dense-all-minilm-l6-v2--int8--384");
    }

    #[test]
    fn errors_name_server_collection_and_remedy() {
        let auth = QdrantError::ResponseError { status: tonic::Status::unauthenticated("Invalid api-key") };
        let msg = describe("http://q:6334", "atlas_x_1", "upsert points", &auth).to_string();
        assert!(msg.contains("http://q:6334") && msg.contains("atlas_x_1") && msg.contains("api_key"), "{msg}");
        let down = QdrantError::ResponseError { status: tonic::Status::internal("Failed to connect to http://q:6334") };
        let msg = describe("http://q:6334", "atlas_x_1", "count points", &down).to_string();
        assert!(msg.contains("unreachable") && msg.contains("count points"), "{msg}");
        let dim = QdrantError::ResponseError {
            status: tonic::Status::invalid_argument("Wrong input: Vector dimension error: expected dim: 384, got 3"),
        };
        let msg = describe("http://q:6334", "atlas_x_1", "upsert points", &dim).to_string();
        assert!(msg.contains("expected dim: 384") && msg.contains("atlas_x_1"), "{msg}");
    }
}
