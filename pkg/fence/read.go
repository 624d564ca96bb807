package fence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// dataLink is the symlink the kubelet's atomic writer swaps to publish a new
// set of files at once.
const dataLink = "..data"

// readAttempts bounds how often Read retries when the files change under it.
const readAttempts = 100

// Read returns one consistent reading of the token files in dir.
//
// When dir holds the kubelet's "..data" symlink, Read resolves it once, reads
// the three files from the directory it points to, and checks that "..data"
// still points there; if it moved, Read starts again. The kubelet never
// changes a published directory, so the three values always come from the
// same update. Without "..data" the files are read directly, which is only
// consistent if whoever writes them replaces them atomically.
//
// Errors wrap ErrAbsent, ErrMalformed or ErrUnstable.
func Read(dir string) (Token, error) {
	return readConsistent(dir, "token files",
		func(from string) (Token, error) { return readFiles(from, dir) },
		func() (Token, error) { return readPlain(dir) })
}

// readConsistent reads files in dir with read, from the directory the
// kubelet's "..data" symlink names, and returns the reading only if the
// link named the same directory after it: the kubelet swaps the link
// atomically, so the files read are of one update. Without the link (files
// not written by a kubelet) it reads with plain. what names the files in
// errors.
func readConsistent[T any](dir, what string, read func(from string) (T, error), plain func() (T, error)) (T, error) {
	var zero T
	for range readAttempts {
		target, err := os.Readlink(filepath.Join(dir, dataLink))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return plain()
		case err != nil:
			return zero, fmt.Errorf("read %s in %s: %w", what, dir, err)
		}
		from := resolve(dir, target)
		v, err := read(from)
		again, lerr := os.Readlink(filepath.Join(dir, dataLink))
		if lerr == nil && resolve(dir, again) == from {
			return v, err
		}
	}
	return zero, fmt.Errorf("read %s in %s: %w", what, dir, ErrUnstable)
}

// resolve returns the directory a "..data" target names.
func resolve(dir, target string) string {
	if filepath.IsAbs(target) {
		return target
	}
	return filepath.Join(dir, target)
}

// readPlain reads files that are not behind a "..data" symlink.
func readPlain(dir string) (Token, error) {
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Token{}, fmt.Errorf("read %s: %w", dir, ErrAbsent)
		}
		return Token{}, fmt.Errorf("read token files in %s: %w", dir, err)
	}
	return readFiles(dir, dir)
}

// readFiles reads and validates the three files in from. Paths in errors
// name the user-visible files in dir.
func readFiles(from, dir string) (Token, error) {
	var raw [3]string
	for i, name := range []string{RoleFile, FenceFile, LeaseFile} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			path := filepath.Join(dir, name)
			if errors.Is(err, fs.ErrNotExist) {
				return Token{}, fmt.Errorf("read %s: %w", path, ErrAbsent)
			}
			return Token{}, fmt.Errorf("read %s: %w", path, err)
		}
		raw[i] = string(b)
	}
	return parseToken(dir, raw[0], raw[1], raw[2])
}

// parseToken validates the contents of the role, fence and lease files.
func parseToken(dir, role, fence, lease string) (Token, error) {
	r, err := parseRole(role)
	if err != nil {
		return Token{}, malformed(dir, RoleFile, err)
	}
	tok := Token{Role: r, Lease: lease}
	if r != RoleHolder {
		return tok, nil
	}
	if fence == "" {
		return Token{}, malformed(dir, FenceFile, errors.New("role is holder but the fence is empty"))
	}
	if tok.Fence, err = ParseFence(fence); err != nil {
		return Token{}, malformed(dir, FenceFile, err)
	}
	return tok, nil
}

func malformed(dir, name string, err error) error {
	return fmt.Errorf("%w %s: %w", ErrMalformed, filepath.Join(dir, name), err)
}
