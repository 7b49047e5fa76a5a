// Package hub downloads models from the Hugging Face hub into the standard Hugging Face cache
// layout, so that files fetched by kvasir, huggingface_hub and other tools are shared.
//
// A reference "hf:ORG/REPO[@REVISION][/FILE]" (see ParseRef) resolves to a snapshot of the
// repository at one commit under Options.CacheDir (see repoCache for the layout). Files are
// fetched resumably (into blobs/<id>.incomplete, continued with HTTP Range requests), checked
// against the sizes and sha256 digests the hub lists, and reused without any blob request
// when already complete. In offline mode the snapshot is found from refs/<revision>.
package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// maxAttempts bounds the tries at one file when the transfer breaks off; each try resumes
// where the previous one stopped.
const maxAttempts = 4

// retryDelay is the pause before the second try, growing linearly after.
const retryDelay = 200 * time.Millisecond

// Download makes the files of ref available in the local cache and returns the local path:
// the file itself when ref names one file or the repository holds a single GGUF model (for
// a split GGUF, its first part), else the snapshot folder (safetensors models). What is
// fetched without a File is described at selectFiles. Files already complete in the cache
// are not downloaded again; with opt.Offline, or when the hub cannot be reached, the path
// is resolved from the cache alone.
//
// Errors wrap ErrNotFound, ErrAuth, ErrChecksum, ErrNetwork, ErrNotCached or ErrChoice.
func Download(ctx context.Context, ref Ref, opt Options) (string, error) {
	opt = opt.withDefaults()
	if err := checkRef(ref); err != nil {
		return "", err
	}
	rev := ref.Revision
	if rev == "" {
		rev = opt.Revision
	}
	if err := checkRevision(rev, true); err != nil {
		return "", fmt.Errorf("hub %s: %w", ref, err)
	}
	rc := newRepoCache(opt.CacheDir, ref.Repo)
	if opt.Offline {
		return resolveCached(rc, ref, rev)
	}
	// A file pinned to a commit needs no request at all once it is there.
	if isCommit(rev) && ref.File != "" && !splitGGUF.MatchString(ref.File) {
		if p := rc.snapshotPath(rev, ref.File); fileSize(p) >= 0 {
			return p, nil
		}
	}

	info, err := fetchInfo(ctx, ref, rev, opt)
	if err != nil {
		if errors.Is(err, ErrNetwork) && ctx.Err() == nil {
			if p, cerr := resolveCached(rc, ref, rev); cerr == nil {
				notef(opt.Progress, "%v\nhub: using the cached copy %s", err, p)
				return p, nil
			}
		}
		return "", err
	}
	byName := make(map[string]sibling, len(info.Siblings))
	names := make([]string, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	sel, err := selectFiles(ref, names)
	if err != nil {
		return "", err
	}
	d := fetcher{ctx: ctx, opt: opt, cache: rc, ref: ref, rev: rev, commit: info.SHA}
	if sel.index != "" {
		if err := d.file(byName[sel.index]); err != nil {
			return "", err
		}
		b, err := os.ReadFile(rc.snapshotPath(info.SHA, sel.index))
		if err != nil {
			return "", fmt.Errorf("hub %s: %w", ref, err)
		}
		have := make(map[string]bool, len(names))
		for _, n := range names {
			have[n] = true
		}
		if sel, err = applyIndex(ref, sel, b, have); err != nil {
			return "", err
		}
	}
	for _, f := range sel.files {
		if err := d.file(byName[f]); err != nil {
			return "", err
		}
	}
	if rev != info.SHA {
		if err := rc.writeRef(rev, info.SHA); err != nil {
			return "", err
		}
	}
	if sel.target == "" {
		return rc.snapshotDir(info.SHA), nil
	}
	return rc.snapshotPath(info.SHA, sel.target), nil
}

// checkRef validates a Ref that may have been built without ParseRef.
func checkRef(ref Ref) error {
	org, repo, ok := strings.Cut(ref.Repo, "/")
	if !ok {
		return fmt.Errorf("hub %q: repository must be ORG/REPO", ref.Repo)
	}
	if err := checkRepoPart(org); err != nil {
		return fmt.Errorf("hub %q: organization: %w", ref.Repo, err)
	}
	if err := checkRepoPart(repo); err != nil {
		return fmt.Errorf("hub %q: repository: %w", ref.Repo, err)
	}
	if ref.File != "" {
		if err := checkFilePath(ref.File); err != nil {
			return fmt.Errorf("hub %q: file: %w", ref.Repo, err)
		}
	}
	return nil
}

// resolveCached finds ref in the cache without the network: the commit from
// refs/<rev> (or rev itself when it is a cached commit), then the files of its snapshot.
func resolveCached(rc repoCache, ref Ref, rev string) (string, error) {
	commit := ""
	if st, err := os.Stat(rc.snapshotDir(rev)); isCommit(rev) && err == nil && st.IsDir() {
		commit = rev
	}
	if commit == "" {
		c, err := rc.readRef(rev)
		if err != nil {
			return "", fmt.Errorf("hub %s: revision %q was never downloaded to %s (offline: HF_HUB_OFFLINE is set or the hub is unreachable): %w",
				ref, rev, rc.dir, ErrNotCached)
		}
		commit = c
	}
	if ref.File != "" && !splitGGUF.MatchString(ref.File) {
		p := rc.snapshotPath(commit, ref.File)
		if fileSize(p) < 0 {
			return "", fmt.Errorf("hub %s: file %q is not in the cached snapshot %s (offline): %w", ref, ref.File, rc.snapshotDir(commit), ErrNotCached)
		}
		return p, nil
	}
	names, err := rc.snapshotFiles(commit)
	if err != nil {
		return "", fmt.Errorf("hub %s: cached snapshot: %w: %w", ref, ErrNotCached, err)
	}
	sel, err := selectFiles(ref, names)
	if err != nil {
		return "", fmt.Errorf("%w (offline: looked only in the cached snapshot %s): %w", err, rc.snapshotDir(commit), ErrNotCached)
	}
	if sel.target == "" {
		return rc.snapshotDir(commit), nil
	}
	return rc.snapshotPath(commit, sel.target), nil
}

// fetcher downloads the files of one repository snapshot into the cache.
type fetcher struct {
	ctx    context.Context
	opt    Options
	cache  repoCache
	ref    Ref
	rev    string // revision as asked, for messages
	commit string // commit the revision resolved to
}

// file makes one repository file present in the snapshot, reusing the snapshot entry or
// the blob when complete, downloading otherwise.
func (d fetcher) file(s sibling) error {
	want := s.expectedSize()
	if complete(d.cache.snapshotPath(d.commit, s.Name), want) {
		return nil
	}
	id := s.blobID()
	if id != "" {
		blob := d.cache.blobPath(id)
		if complete(blob, want) {
			return d.cache.link(d.commit, s.Name, id)
		}
		if fileSize(blob) >= 0 { // a blob of the wrong size: fetch it again
			if err := os.Remove(blob); err != nil {
				return fmt.Errorf("hub %s: %w", d.ref, err)
			}
		}
	}
	id, err := d.blob(s, id)
	if err != nil {
		return err
	}
	return d.cache.link(d.commit, s.Name, id)
}

// blob downloads a file into blobs/, trying again (resuming) when the transfer breaks off,
// and returns the blob's id. With id "" (the listing gave none) the id is taken from the
// response's ETag or the content's sha256, and the download starts over on each try.
func (d fetcher) blob(s sibling, id string) (string, error) {
	part := ""
	if id != "" {
		part = d.cache.blobPath(id) + ".incomplete"
	} else {
		h := sha256.Sum256([]byte(d.commit + "/" + s.Name))
		part = d.cache.blobPath("unnamed-"+hex.EncodeToString(h[:12])) + ".incomplete"
	}
	if err := os.MkdirAll(filepath.Dir(part), 0o755); err != nil {
		return "", fmt.Errorf("hub %s: %w", d.ref, err)
	}
	var got fetched
	for attempt := 1; ; attempt++ {
		var err error
		got, err = d.fetchOnce(s, part, id != "")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNetwork) || attempt == maxAttempts || d.ctx.Err() != nil {
			return "", err
		}
		notef(d.opt.Progress, "%v; retrying (%d/%d)", err, attempt+1, maxAttempts)
		select {
		case <-d.ctx.Done():
			return "", d.ctx.Err()
		case <-time.After(time.Duration(attempt) * retryDelay):
		}
	}
	if id == "" {
		id = got.sha256
		if safeName(got.etag) {
			id = got.etag
		}
	}
	if err := os.Rename(part, d.cache.blobPath(id)); err != nil {
		return "", fmt.Errorf("hub %s: %w", d.ref, err)
	}
	return id, nil
}

// fetched is what one completed transfer learned about the blob.
type fetched struct {
	sha256 string // hex digest of the whole content
	etag   string // the hub's ETag for the file, without quotes, or ""
}

// fetchOnce makes one try at downloading s into part, continuing a partial file there
// when resume is set. It verifies the size and the sha256 the hub listed; on a mismatch
// it removes part and fails with ErrChecksum. Interrupted transfers fail with ErrNetwork
// and leave part for the next try.
func (d fetcher) fetchOnce(s sibling, part string, resume bool) (fetched, error) {
	what := fmt.Sprintf("file %q", s.Name)
	want := s.expectedSize()
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fetched{}, fmt.Errorf("hub %s: %s: %w", d.ref, what, err)
	}
	defer f.Close()

	// Hash what is already there so the digest covers the whole file.
	h := sha256.New()
	offset := int64(0)
	if resume {
		offset = max(fileSize(part), 0)
		if want >= 0 && offset > want {
			offset = 0
		}
		if offset > 0 {
			if _, err := io.CopyN(h, f, offset); err != nil {
				h.Reset()
				offset = 0
			}
		}
	}
	if err := f.Truncate(offset); err != nil {
		return fetched{}, fmt.Errorf("hub %s: %s: %w", d.ref, what, err)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fetched{}, fmt.Errorf("hub %s: %s: %w", d.ref, what, err)
	}

	var got fetched
	if want < 0 || offset < want {
		got.etag, offset, err = d.transfer(s, f, h, offset)
		if err != nil {
			return fetched{}, err
		}
	}
	got.sha256 = hex.EncodeToString(h.Sum(nil))
	if want >= 0 && offset != want {
		if offset < want {
			return fetched{}, fmt.Errorf("hub %s: %s: transfer ended at %d of %d bytes: %w", d.ref, what, offset, want, ErrNetwork)
		}
		f.Close()
		os.Remove(part)
		return fetched{}, fmt.Errorf("hub %s: %s: got %d bytes, the hub lists %d: %w", d.ref, what, offset, want, ErrChecksum)
	}
	if sum := s.sha256(); sum != "" && got.sha256 != sum {
		f.Close()
		os.Remove(part)
		return fetched{}, fmt.Errorf("hub %s: %s: sha256 %s, the hub lists %s (partial download removed; try again): %w",
			d.ref, what, got.sha256, sum, ErrChecksum)
	}
	if err := f.Sync(); err != nil {
		return fetched{}, fmt.Errorf("hub %s: %s: %w", d.ref, what, err)
	}
	if err := f.Close(); err != nil {
		return fetched{}, fmt.Errorf("hub %s: %s: %w", d.ref, what, err)
	}
	return got, nil
}

// transfer requests s from offset on and appends the body to f (positioned at offset) and
// h. It returns the file's ETag and the new end offset. A server that ignores the Range
// request makes it start over at 0.
func (d fetcher) transfer(s sibling, f *os.File, h hashWriter, offset int64) (string, int64, error) {
	what := fmt.Sprintf("file %q", s.Name)
	u := resolveURL(d.opt.Endpoint, d.ref.Repo, d.commit, s.Name)
	req, err := newRequest(d.ctx, http.MethodGet, u, d.opt)
	if err != nil {
		return "", offset, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := d.opt.Client.Do(req)
	if err != nil {
		if cerr := d.ctx.Err(); cerr != nil {
			return "", offset, fmt.Errorf("hub %s: %s: %w", d.ref, what, cerr)
		}
		return "", offset, fmt.Errorf("hub %s: %s: cannot reach %s: %w: %w", d.ref, what, d.opt.Endpoint, ErrNetwork, err)
	}
	defer resp.Body.Close()

	switch resp.StatusCode {
	case http.StatusOK:
		if offset > 0 { // the server sent the whole file
			if err := restart(f, h); err != nil {
				return "", 0, fmt.Errorf("hub %s: %s: %w", d.ref, what, err)
			}
			offset = 0
		}
	case http.StatusPartialContent:
		if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != offset {
			restart(f, h)
			return "", 0, fmt.Errorf("hub %s: %s: asked for bytes from %d, got range %q: %w",
				d.ref, what, offset, resp.Header.Get("Content-Range"), ErrNetwork)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		restart(f, h)
		return "", 0, fmt.Errorf("hub %s: %s: cannot resume at byte %d (HTTP 416); starting over: %w", d.ref, what, offset, ErrNetwork)
	default:
		return "", offset, statusError(d.ref, d.rev, what, resp, d.opt.Token != "")
	}

	total := s.expectedSize()
	if total < 0 && resp.ContentLength >= 0 {
		total = offset + resp.ContentLength
	}
	bar := newProgress(d.opt.Progress, s.Name, total, offset)
	n, err := io.Copy(io.MultiWriter(f, h, bar), readerOnly{resp.Body})
	bar.finish(err == nil)
	offset += n
	if err != nil {
		var re readError
		switch {
		case d.ctx.Err() != nil:
			return "", offset, fmt.Errorf("hub %s: %s: %w", d.ref, what, d.ctx.Err())
		case errors.As(err, &re):
			return "", offset, fmt.Errorf("hub %s: %s: transfer broke off at byte %d: %w: %w", d.ref, what, offset, ErrNetwork, re.err)
		}
		return "", offset, fmt.Errorf("hub %s: %s: write %s: %w", d.ref, what, f.Name(), err)
	}
	return etagOf(resp, u), offset, nil
}

// hashWriter is the hash being fed the file's content.
type hashWriter interface {
	io.Writer
	Reset()
}

// restart empties f and h for a download from the first byte.
func restart(f *os.File, h hashWriter) error {
	h.Reset()
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}

// rangeStart parses the first byte position of a "bytes START-END/TOTAL" Content-Range.
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(start), 10, 64)
	return n, err == nil && n >= 0
}

// etagOf returns the hub's id for the file from a response: X-Linked-Etag (set on LFS
// redirects), else the ETag when the response came from the hub itself (not a CDN it
// redirected to). Quotes and a weak "W/" prefix are removed.
func etagOf(resp *http.Response, asked string) string {
	tag := resp.Header.Get("X-Linked-Etag")
	if tag == "" && resp.Request != nil && resp.Request.URL.String() == asked {
		tag = resp.Header.Get("Etag")
	}
	tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
	return strings.Trim(tag, `"`)
}

// readError marks an error from reading the response body (as opposed to writing the file).
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }

// readerOnly wraps a body so that its read errors come back as readError. It hides any
// WriterTo so that io.Copy goes through Read.
type readerOnly struct{ r io.Reader }

func (r readerOnly) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = readError{err}
	}
	return n, err
}
