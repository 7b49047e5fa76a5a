package hub

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// repoCache is one repository's folder in the hub cache, laid out as huggingface_hub does:
//
//	models--ORG--REPO/
//	  blobs/<sha256 or git blob id>          file contents (".incomplete" while downloading)
//	  snapshots/<commit>/<path> -> ../../blobs/<id>   relative symlinks, one tree per commit
//	  refs/<revision>                        the commit a branch or tag pointed at
type repoCache struct {
	dir string
}

// newRepoCache returns the cache folder of repo ("ORG/REPO") under cacheDir.
func newRepoCache(cacheDir, repo string) repoCache {
	return repoCache{dir: filepath.Join(cacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))}
}

// blobPath returns the path of a blob.
func (c repoCache) blobPath(id string) string { return filepath.Join(c.dir, "blobs", id) }

// snapshotDir returns the snapshot folder of a commit.
func (c repoCache) snapshotDir(commit string) string {
	return filepath.Join(c.dir, "snapshots", commit)
}

// snapshotPath returns where a repository file appears in a commit's snapshot.
func (c repoCache) snapshotPath(commit, file string) string {
	return filepath.Join(c.snapshotDir(commit), filepath.FromSlash(file))
}

// readRef returns the commit a revision pointed at when last resolved online.
func (c repoCache) readRef(rev string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(b))
	if !safeName(commit) {
		return "", fmt.Errorf("hub cache %s: refs/%s holds a bad commit %q", c.dir, rev, commit)
	}
	return commit, nil
}

// writeRef records that rev points at commit (atomically, by rename).
func (c repoCache) writeRef(rev, commit string) error {
	p := filepath.Join(c.dir, "refs", filepath.FromSlash(rev))
	if old, err := os.ReadFile(p); err == nil && string(old) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".ref-*")
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	_, werr := tmp.WriteString(commit)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("hub cache: write ref %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("hub cache: write ref %s: %w", p, err)
	}
	return nil
}

// fileSize returns the size of the file at p (following symlinks), or -1 when p is not a
// readable regular file.
func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return -1
	}
	return st.Size()
}

// complete reports whether p holds a regular file of the wanted size (any size when want
// is negative).
func complete(p string, want int64) bool {
	n := fileSize(p)
	return n >= 0 && (want < 0 || n == want)
}

// link makes snapshots/<commit>/<file> point at the blob with a relative symlink. Where
// symlinks are not allowed it falls back to a hard link, then to a copy.
func (c repoCache) link(commit, file, blobID string) error {
	dst := c.snapshotPath(commit, file)
	blob := c.blobPath(blobID)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err != nil {
		return fmt.Errorf("hub cache: link %s: %w", dst, err)
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return nil
	}
	if _, err := os.Lstat(dst); err == nil {
		if err := os.Remove(dst); err != nil {
			return fmt.Errorf("hub cache: replace %s: %w", dst, err)
		}
	}
	if err := os.Symlink(rel, dst); err == nil {
		return nil
	}
	if err := os.Link(blob, dst); err == nil {
		return nil
	}
	if err := copyFile(blob, dst); err != nil {
		return fmt.Errorf("hub cache: link %s: %w", dst, err)
	}
	return nil
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, cerr := io.Copy(out, in)
	if err := errors.Join(cerr, out.Close()); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

// snapshotFiles lists the files of a snapshot as "/"-separated repository paths.
func (c repoCache) snapshotFiles(commit string) ([]string, error) {
	root := c.snapshotDir(commit)
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if fileSize(p) < 0 { // dangling link
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	return names, err
}
