//! Streaming transfers of large objects (base backups): an upload fed from a reader as a
//! multipart upload, a few parts in flight and never the whole object in memory or on disk, and a
//! download into a writer; both count the bytes and hash them (SHA-256) on the way.

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMultipartOptions, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::store::{Store, StoreError};

/// The size of each uploaded part (S3 needs at least 5 MiB for all but the last).
pub const PART_BYTES: usize = 16 * 1024 * 1024;
/// Parts uploading at once: memory stays under `PART_BYTES × (PARTS_IN_FLIGHT + 1)`.
const PARTS_IN_FLIGHT: usize = 3;
/// How much is read from the source at a time.
const READ_BYTES: usize = 1024 * 1024;

/// What went through a transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transferred {
    /// Bytes.
    pub bytes: u64,
    /// Their SHA-256, hex.
    pub sha256: String,
}

fn hex(digest: Sha256) -> String {
    digest.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

impl Store {
    /// Uploads everything `reader` yields as the object `name` (under the destination's path). A
    /// failure aborts the upload, so no partial object is left behind.
    pub async fn upload_stream<R: AsyncRead + Unpin>(
        &self,
        name: &str,
        mut reader: R,
    ) -> Result<Transferred, StoreError> {
        let path = ObjectPath::from(self.key(name).as_str());
        let upload = self
            .client()
            .put_multipart_opts(&path, PutMultipartOptions::default())
            .await
            .map_err(|e| self.failed(&e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut digest = Sha256::new();
        let mut bytes = 0_u64;
        let mut buffer = vec![0_u8; READ_BYTES];
        loop {
            let read = match reader.read(&mut buffer).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) => {
                    let _ = writer.abort().await;
                    return Err(StoreError::Store(format!("reading the backup stream: {error}")));
                }
            };
            if let Err(error) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                let _ = writer.abort().await;
                return Err(self.failed(&error));
            }
            digest.update(&buffer[..read]);
            bytes += read as u64;
            writer.write(&buffer[..read]);
        }
        writer.finish().await.map_err(|e| self.failed(&e))?;
        Ok(Transferred { bytes, sha256: hex(digest) })
    }

    /// Downloads the object `name` into `writer`.
    pub async fn download_stream<W: AsyncWrite + Unpin>(
        &self,
        name: &str,
        writer: &mut W,
    ) -> Result<Transferred, StoreError> {
        let path = ObjectPath::from(self.key(name).as_str());
        let mut stream = self.client().get(&path).await.map_err(|e| self.failed(&e))?.into_stream();
        let mut digest = Sha256::new();
        let mut bytes = 0_u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.failed(&e))?;
            digest.update(&chunk);
            bytes += chunk.len() as u64;
            writer
                .write_all(&chunk)
                .await
                .map_err(|e| StoreError::Store(format!("writing the downloaded backup: {e}")))?;
        }
        writer.flush().await.map_err(|e| StoreError::Store(format!("writing the downloaded backup: {e}")))?;
        Ok(Transferred { bytes, sha256: hex(digest) })
    }
}
