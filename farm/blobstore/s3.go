package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3Config names a bucket and where keys go in it.
type S3Config struct {
	Bucket string
	Prefix string // prepended to every key, without slashes at its ends
	// Endpoint overrides the S3 endpoint (an S3-compatible server).
	Endpoint string
	// Region; empty means the SDK's chain, else us-east-1 with an Endpoint.
	Region string
	// PathStyle addresses the bucket in the path (most S3-compatible servers).
	PathStyle bool
}

// S3 is a Store in an S3 bucket.
type S3 struct {
	cfg    S3Config
	client *s3.Client
}

// deleteBatch is DeleteObjects' limit.
const deleteBatch = 1000

// NewS3 builds the client; credentials come from the AWS SDK's default chain
// (environment, shared config, instance or pod role) and are never logged.
func NewS3(ctx context.Context, c S3Config) (*S3, error) {
	if c.Bucket == "" {
		return nil, errors.New("blob store: S3 bucket is required")
	}
	var opts []func(*config.LoadOptions) error
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	} else if c.Endpoint != "" {
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("blob store: AWS configuration: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
	})
	return &S3{cfg: c, client: client}, nil
}

func (s *S3) String() string {
	u := "s3://" + s.cfg.Bucket + "/" + s.cfg.Prefix
	if s.cfg.Endpoint != "" {
		u += " at " + s.cfg.Endpoint
	}
	return u
}

func (s *S3) key(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if s.cfg.Prefix == "" {
		return key, nil
	}
	return path.Join(s.cfg.Prefix, key), nil
}

func (s *S3) Put(ctx context.Context, key string, data []byte, contentType string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k), Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))), ContentType: aws.String(contentType),
	})
	if err != nil {
		return fmt.Errorf("blob %s: put: %w", key, err)
	}
	return nil
}

func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k)})
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return nil, fmt.Errorf("blob %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: get: %w", key, err)
	}
	return out.Body, nil
}

// Delete deletes keys in batches of deleteBatch. A batch that fails does
// not stop the others (each failure left behind is a blob nobody deletes
// later); the errors are joined. A key that is not valid fails at once,
// before any batch.
func (s *S3) Delete(ctx context.Context, keys []string) error {
	all := make([]types.ObjectIdentifier, 0, len(keys))
	for _, key := range keys {
		k, err := s.key(key)
		if err != nil {
			return err
		}
		all = append(all, types.ObjectIdentifier{Key: aws.String(k)})
	}
	var errs []error
	for len(all) > 0 {
		n := min(len(all), deleteBatch)
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.cfg.Bucket), Delete: &types.Delete{Objects: all[:n], Quiet: aws.Bool(true)},
		})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("blob store: delete %d objects: %w", n, err))
		case len(out.Errors) > 0:
			e := out.Errors[0]
			errs = append(errs, fmt.Errorf("blob store: %d of %d deletes failed, first %s: %s", len(out.Errors), n,
				aws.ToString(e.Key), aws.ToString(e.Message)))
		}
		all = all[n:]
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}
