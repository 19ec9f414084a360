package main

import (
	"context"

	"github.com/browserfarm/browserfarm/farm/blobstore"
)

// blobOptions is --blob-store, shared by the consumer (which writes blobs),
// the producer (whose API reads them and whose retention deletes them) and
// `farm results` (which exports them).
type blobOptions struct {
	url string
}

func (o *blobOptions) register(fs *flagSet) {
	fs.StringVar(&o.url, "blob-store", "", "keep results' HTML and screenshots in s3://bucket/prefix (options ?endpoint=URL&region=R&path_style=true) "+
		"or file:///dir, with only their key, size and hash in PostgreSQL (default: in PostgreSQL); consumers, producers and farm results must agree")
}

// open returns the store, or nil when none is configured.
func (o *blobOptions) open(ctx context.Context) (blobstore.Store, error) {
	if o.url == "" {
		return nil, nil
	}
	s, err := blobstore.Open(ctx, o.url)
	if err != nil {
		return nil, usagef("--blob-store: %v", err)
	}
	return s, nil
}
