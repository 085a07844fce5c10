//! The gateway's shared state and the `s3s::S3` trait: each operation is a thin call into the
//! module that owns it (`bucket_ops`, `object_ops`, `list_ops`, `multipart`, `access_ops`).

use crate::data::BodyDeadlines;
use crate::metrics::{LimitCounters, S3Metrics};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::http::Extensions;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::Backend;
use crate::buckets::{get_bucket, BucketCache, BucketInfo};
use crate::config::GatewayConfig;
use crate::convert::nanos;
use crate::identity::{self, AdmittedBucket, ANONYMOUS};
use crate::ratelimit::Limiter;
use crate::users::Users;
use crate::{
    access_ops, bucket_ops, controls_ops, cors_ops, lifecycle_ops, list_ops, lock_ops, multipart,
    object_ops, tag_ops, version_ops,
};

/// Semaphore permits (KiB, at most `u32::MAX`) standing for `bytes` of request bodies.
fn body_permits(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// The S3 service over one pool of the cluster.
#[derive(Clone)]
pub struct Gateway {
    /// Cluster objects of the gateway's pool: indexes, records, and STANDARD data.
    pub backend: Arc<dyn Backend>,
    /// The data pools of the other storage classes, by class name (`storage_class`).
    pub classes: Arc<BTreeMap<String, Arc<dyn Backend>>>,
    /// The cluster client behind `backend`, when it is the cluster: gateways over one pool
    /// take turns at the lifecycle pass through a lease on it (`lifecycle_pass`).
    pub cluster: Option<Arc<cairn_client::Client>>,
    /// Settings.
    pub cfg: Arc<GatewayConfig>,
    /// Users and their keys.
    pub users: Arc<Users>,
    /// Bucket records for requests that only read a bucket.
    pub buckets: Arc<BucketCache>,
    /// Rate limits.
    pub limiter: Arc<Limiter>,
    /// Time origin of the limiter's clock.
    pub epoch: Instant,
    /// Counters of its operations and HTTP requests (its Prometheus page).
    pub metrics: Arc<S3Metrics>,
    /// Room for request bodies being stored, KiB (see `max_inflight_body_bytes`).
    bodies: Arc<Semaphore>,
}

impl Gateway {
    /// A gateway over `backend`.
    pub fn new(backend: Arc<dyn Backend>, cfg: GatewayConfig) -> Self {
        Gateway {
            users: Arc::new(Users::new(backend.clone())),
            buckets: Arc::new(BucketCache::new(Duration::from_millis(cfg.bucket_cache_ms))),
            limiter: Arc::new(Limiter::new(cfg.limits.clone())),
            bodies: Arc::new(Semaphore::new(
                body_permits(cfg.max_inflight_body_bytes) as usize
            )),
            backend,
            classes: Arc::new(BTreeMap::new()),
            cluster: None,
            cfg: Arc::new(cfg),
            epoch: Instant::now(),
            metrics: Arc::new(S3Metrics::default()),
        }
    }

    /// This gateway with the data pools of storage classes besides STANDARD.
    pub fn with_storage_classes(mut self, classes: BTreeMap<String, Arc<dyn Backend>>) -> Self {
        self.classes = Arc::new(classes);
        self
    }

    /// This gateway with the cluster client behind its backend.
    pub fn with_cluster(mut self, client: Arc<cairn_client::Client>) -> Self {
        self.cluster = Some(client);
        self
    }

    /// Where the data of storage class `class` lives (None: STANDARD, the gateway's pool).
    /// A class no longer configured is an error: its data cannot be reached.
    pub fn data_for(&self, class: Option<&str>) -> S3Result<&Arc<dyn Backend>> {
        match class {
            None => Ok(&self.backend),
            Some(name) => self.classes.get(name).ok_or_else(|| {
                s3_error!(
                    InternalError,
                    "storage class {name} is no longer configured on this gateway"
                )
            }),
        }
    }

    /// The class a request names, checked against the configured ones (see
    /// `storage_class::requested`).
    pub fn class_requested(&self, named: Option<&str>) -> S3Result<Option<String>> {
        crate::storage_class::requested(named, self.classes.keys())
    }

    /// Waits, first come first served, until a body of `len` bytes (unknown: `None`) may be
    /// received and stored; the room is given back when the permit drops. A body that waits
    /// longer than `body_admit_timeout_ms` is refused with 503 SlowDown.
    pub async fn admit_body(&self, len: Option<u64>) -> S3Result<OwnedSemaphorePermit> {
        let most = self.cfg.stripe_bytes;
        let want = len.unwrap_or(most).min(most);
        let total = body_permits(self.cfg.max_inflight_body_bytes);
        let permits = (body_permits(want).max(1)).min(total);
        let wait = Duration::from_millis(self.cfg.body_admit_timeout_ms);
        match tokio::time::timeout(wait, self.bodies.clone().acquire_many_owned(permits)).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(s3_error!(
                ServiceUnavailable,
                "the gateway is shutting down"
            )),
            Err(_) => {
                LimitCounters::bump(&self.metrics.limits.bodies_refused);
                Err(s3_error!(
                    SlowDown,
                    "no room for another request body within {} ms; retry later",
                    wait.as_millis()
                ))
            }
        }
    }

    /// How long a request body may be idle and may take per stripe (from the settings).
    pub fn body_deadlines(&self) -> BodyDeadlines {
        BodyDeadlines {
            idle: Duration::from_millis(self.cfg.body_idle_timeout_ms),
            stripe: Duration::from_millis(self.cfg.body_stripe_timeout_ms),
        }
    }

    /// The user name behind a request (None: anonymous).
    pub fn caller<T>(&self, req: &S3Request<T>) -> Option<String> {
        identity::caller(&req.extensions).map(|id| id.user.clone())
    }

    /// The user name behind a request (AccessDenied if anonymous).
    pub fn user_of<T>(&self, req: &S3Request<T>) -> S3Result<String> {
        self.caller(req).ok_or_else(|| s3_error!(AccessDenied))
    }

    /// The record of bucket `name` that admission authorized the request (whose extensions
    /// are `ext`) against; read afresh when admission did not look it up.
    pub async fn bucket(&self, ext: &Extensions, name: &str) -> S3Result<BucketInfo> {
        match ext.get::<AdmittedBucket>() {
            Some(AdmittedBucket(b)) if b.name == name => Ok(b.clone()),
            _ => get_bucket(&self.backend, name).await,
        }
    }

    /// Charges response body bytes to the request's user (or the anonymous requesters) and
    /// bucket.
    pub fn charge_response<T>(&self, req: &S3Request<T>, bucket: &str, bytes: u64) {
        let user = self.caller(req);
        let now_ns = nanos(self.epoch.elapsed());
        self.limiter
            .charge_bytes(user.as_deref().unwrap_or(ANONYMOUS), bucket, bytes, now_ns);
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        bucket_ops::create(self, req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        bucket_ops::delete(self, req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        bucket_ops::head(self, req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        bucket_ops::list(self, req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        bucket_ops::location(self, req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        object_ops::put(self, req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        object_ops::get(self, req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        object_ops::head(self, req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        object_ops::delete(self, req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        object_ops::delete_many(self, req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        object_ops::copy(self, req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        list_ops::v1(self, req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        list_ops::v2(self, req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        multipart::create(self, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        multipart::upload_part(self, req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        object_ops::attributes(self, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        multipart::upload_part_copy(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        multipart::complete(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        multipart::abort(self, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        multipart::list_parts(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        multipart::list_uploads(self, req).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        access_ops::get_bucket_acl(self, req).await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        access_ops::put_bucket_acl(self, req).await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        access_ops::get_object_acl(self, req).await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        access_ops::put_object_acl(self, req).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        access_ops::get_bucket_policy(self, req).await
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        access_ops::put_bucket_policy(self, req).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        access_ops::delete_bucket_policy(self, req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        version_ops::put(self, req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        version_ops::get(self, req).await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        tag_ops::put_object(self, req).await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        tag_ops::get_object(self, req).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        tag_ops::delete_object(self, req).await
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        tag_ops::put_bucket(self, req).await
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        tag_ops::get_bucket(self, req).await
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        tag_ops::delete_bucket(self, req).await
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        cors_ops::put(self, req).await
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        cors_ops::get(self, req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        cors_ops::delete(self, req).await
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        lock_ops::put_config(self, req).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        lock_ops::get_config(self, req).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        lock_ops::put_retention(self, req).await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        lock_ops::get_retention(self, req).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        lock_ops::put_legal_hold(self, req).await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        lock_ops::get_legal_hold(self, req).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        version_ops::list(self, req).await
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        controls_ops::put_public_access_block(self, req).await
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        controls_ops::get_public_access_block(self, req).await
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        controls_ops::delete_public_access_block(self, req).await
    }

    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        controls_ops::put_ownership_controls(self, req).await
    }

    async fn get_bucket_ownership_controls(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        controls_ops::get_ownership_controls(self, req).await
    }

    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        controls_ops::delete_ownership_controls(self, req).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        controls_ops::get_policy_status(self, req).await
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        lifecycle_ops::put(self, req).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        lifecycle_ops::get(self, req).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        lifecycle_ops::delete(self, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    #[tokio::test]
    async fn bodies_are_admitted_first_come_first_served_within_the_budget() {
        let cfg = GatewayConfig {
            max_inflight_body_bytes: 8 << 20,
            stripe_bytes: 4 << 20,
            ..GatewayConfig::default()
        };
        let gw = Arc::new(Gateway::new(Arc::new(MemBackend::default()), cfg));
        let huge = gw.admit_body(Some(100 << 20)).await.unwrap();
        let unknown = gw.admit_body(None).await.unwrap();
        let (tx, mut admitted) = tokio::sync::mpsc::unbounded_channel();
        for (name, len) in [("big", 4u64 << 20), ("small", 4096)] {
            let (gw, tx) = (gw.clone(), tx.clone());
            tokio::spawn(async move {
                let permit = gw.admit_body(Some(len)).await.unwrap();
                let _ = tx.send((name, permit));
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            admitted.try_recv().is_err(),
            "a long body counts one stripe, so two fill the budget"
        );
        drop(huge);
        let (first, _big) = admitted.recv().await.unwrap();
        assert_eq!(first, "big");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            admitted.try_recv().is_err(),
            "the small body came later and waits its turn"
        );
        drop(unknown);
        assert_eq!(admitted.recv().await.unwrap().0, "small");
    }
}
