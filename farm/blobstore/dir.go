package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Dir is a Store in a local directory: one file per key.
type Dir struct {
	root string
}

// blobMode is a blob file's mode: readable by the group, as its
// directories are (0750), so a producer running as another user of the
// group serves what the consumers wrote.
const blobMode = 0o640

// staleTempAge is how old a Put's temporary file must be before Delete
// takes it for the leftover of a process that died writing it (a Put
// takes seconds at most) rather than a Put under way.
const staleTempAge = time.Hour

// tempPrefix starts the name of a Put's temporary file.
const tempPrefix = ".put-"

// NewDir uses (and creates) the directory root.
func NewDir(root string) (*Dir, error) {
	if root == "" || !filepath.IsAbs(root) {
		return nil, fmt.Errorf("blob store directory %q: want an absolute path", root)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return &Dir{root: filepath.Clean(root)}, nil
}

func (d *Dir) String() string { return "file://" + d.root }

func (d *Dir) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put writes a temporary file next to the blob and renames it into place, so
// a reader never sees half a blob.
func (d *Dir) Put(ctx context.Context, key string, data []byte, _ string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return fmt.Errorf("blob %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("blob %s: %w", key, err)
	}
	// CreateTemp makes it 0600.
	werr := tmp.Chmod(blobMode)
	if werr == nil {
		_, werr = tmp.Write(data)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), p)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("blob %s: %w", key, werr)
	}
	// The rename, and the directories MkdirAll made, are durable only once
	// their directories are: the result that points here is committed next,
	// and after a power loss it must not point at nothing.
	for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("blob %s: %w", key, err)
		}
		if dir == d.root || len(dir) <= len(d.root) {
			break
		}
	}
	return nil
}

// syncDir flushes a directory's entries to disk.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (d *Dir) Open(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", key, err)
	}
	return f, nil
}

// Delete removes the files and then the directories they leave empty,
// with the temporary files a process that died in Put left there. Each
// directory is tidied once, after every file of it is gone (a job's HTML
// and screenshot share one).
func (d *Dir) Delete(_ context.Context, keys []string) error {
	var errs []error
	var dirs []string
	seen := map[string]bool{}
	for _, key := range keys {
		p, err := d.path(key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("blob %s: %w", key, err))
			continue
		}
		if dir := filepath.Dir(p); !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
	}
	now := time.Now()
	for _, dir := range dirs {
		d.removeEmpty(dir, now)
	}
	return errors.Join(errs...)
}

// removeEmpty removes dir and then its parents below the root, each only
// if empty, stopping at the first that is not. Only a directory that is not
// empty is listed, for the stale temporary files that may be all it holds:
// the retention purge empties most job directories whole, and a removal
// costs one system call where a listing costs three.
func (d *Dir) removeEmpty(dir string, now time.Time) {
	below := func(p string) bool { return len(p) > len(d.root) }
	if !below(dir) {
		return
	}
	if os.Remove(dir) != nil {
		removeStaleTemps(dir, now)
		if os.Remove(dir) != nil {
			return
		}
	}
	for dir = filepath.Dir(dir); below(dir); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty (or gone): stop climbing
			return
		}
	}
}

// removeStaleTemps removes the temporary files in dir older than
// staleTempAge, best effort: one left would keep its directory for ever.
func removeStaleTemps(dir string, now time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tempPrefix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > staleTempAge {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
