package farm

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/farm/blobstore"
)

// blobTimeout bounds one retention delete call.
const blobTimeout = time.Minute

// ClassBlobStore is the error class of an attempt whose render could not be
// stored in the blob store (retriable).
const ClassBlobStore = "blob_store"

// blobDeleter is the retention purge's callback: it deletes the blobs of
// the rows just deleted. A failure leaves orphan blobs (logged), never a row
// that points at nothing.
func blobDeleter(ctx context.Context, store blobstore.Store, log *zap.Logger) func(keys []string) {
	return func(keys []string) {
		if store == nil {
			log.Warn("purged results kept blobs in a blob store, but this producer has no --blob-store: they stay there",
				zap.Int("blobs", len(keys)))
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), blobTimeout)
		defer cancel()
		if err := store.Delete(dctx, keys); err != nil {
			log.Warn("deleting purged results' blobs failed; they stay in the store", zap.Int("blobs", len(keys)), zap.Error(err))
		}
	}
}
