// Package imagecheck holds the in-image job check of scripts/image-check.sh:
// a test, built only with the imagecheck tag, that runs the consumer from a
// container image's exported filesystem (under chroot, as the image's
// entrypoint runs it) against a PostgreSQL and internal/testsite on
// 127.0.0.1 and checks it renders a job and drains on SIGTERM.
package imagecheck
