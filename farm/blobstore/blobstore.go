// Package blobstore keeps the large parts of results — page HTML and
// screenshots — outside PostgreSQL, in an S3-compatible bucket or a local
// directory, so that the queue's database holds only their keys, sizes and
// hashes and stays small, fast to vacuum and cheap to back up.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Store holds blobs by key. Implementations are safe for concurrent use.
type Store interface {
	// Put stores data under key, replacing what was there.
	Put(ctx context.Context, key string, data []byte, contentType string) error
	// Open streams the blob; ErrNotFound when there is none.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the blobs; a missing key is not an error.
	Delete(ctx context.Context, keys []string) error
	// String names the store for logs (no credentials).
	String() string
}

// ErrNotFound: no blob under that key.
var ErrNotFound = errors.New("blob not found")

// Open returns the store a URL names:
//
//	file:///var/lib/browserfarm/blobs              a local directory
//	s3://bucket/prefix                             an S3 bucket (credentials and region from the AWS SDK's default chain)
//	s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1&path_style=true
//	                                               an S3-compatible server (MinIO, Ceph, …)
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("blob store URL: %w", err)
	}
	// Credentials come from the AWS SDK's chain only: in the URL they would
	// be ignored, and repeated in every message that names the store.
	if u.User != nil {
		return nil, errors.New("blob store URL: it holds a user or password; credentials come from the AWS SDK's default chain (environment, profile, instance role), never the URL")
	}
	if ep, err := url.Parse(u.Query().Get("endpoint")); err == nil && ep.User != nil {
		return nil, errors.New("blob store URL: its endpoint holds a user or password; credentials come from the AWS SDK's default chain, never the URL")
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("blob store %q: a file URL names a local directory: file:///path", rawURL)
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("blob store %q: a file URL takes no options", rawURL)
		}
		return NewDir(u.Path)
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("blob store %q: no bucket: s3://bucket/prefix", rawURL)
		}
		cfg := S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
		q := u.Query()
		for k := range q {
			switch k {
			case "endpoint", "region", "path_style":
			default:
				return nil, fmt.Errorf("blob store %q: unknown option %q (endpoint, region, path_style)", rawURL, k)
			}
		}
		cfg.Endpoint, cfg.Region = q.Get("endpoint"), q.Get("region")
		switch q.Get("path_style") {
		case "", "false":
		case "true":
			cfg.PathStyle = true
		default:
			return nil, fmt.Errorf("blob store %q: path_style=%q is not true or false", rawURL, q.Get("path_style"))
		}
		return NewS3(ctx, cfg)
	default:
		return nil, fmt.Errorf("blob store %q: want file:///path or s3://bucket/prefix", rawURL)
	}
}

// checkKey refuses keys that could leave the store's namespace.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") {
		return fmt.Errorf("blob key %q: want a relative slash-separated path", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("blob key %q: empty, . or .. path element", key)
		}
	}
	return nil
}
