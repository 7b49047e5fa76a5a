package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// userAgent identifies kvasir to the hub.
const userAgent = "kvasir (hub client)"

// maxInfoBytes bounds the revision listing read from the hub.
const maxInfoBytes = 64 << 20

// repoInfo is the part of GET /api/models/{repo}/revision/{rev}?blobs=true that we use.
type repoInfo struct {
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

// sibling is one file of a repository at a revision.
type sibling struct {
	Name   string   `json:"rfilename"`
	Size   *int64   `json:"size"`   // present with blobs=true
	BlobID string   `json:"blobId"` // git object id, present with blobs=true
	LFS    *lfsInfo `json:"lfs"`    // set for files stored with git LFS
}

// lfsInfo describes a git LFS file: its content hash and size.
type lfsInfo struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// expectedSize returns the file's size as listed by the hub, or -1 when unknown.
func (s sibling) expectedSize() int64 {
	if s.LFS != nil && s.LFS.Size > 0 {
		return s.LFS.Size
	}
	if s.Size != nil && *s.Size >= 0 {
		return *s.Size
	}
	return -1
}

// sha256 returns the lowercase hex sha256 the hub announces for an LFS file, or "".
func (s sibling) sha256() string {
	if s.LFS == nil || !isHex(s.LFS.SHA256, 64) {
		return ""
	}
	return strings.ToLower(s.LFS.SHA256)
}

// blobID returns the name of the file's blob in the cache as huggingface_hub names it (the
// LFS sha256, else the git blob id), or "" when the listing does not say.
func (s sibling) blobID() string {
	if h := s.sha256(); h != "" {
		return h
	}
	if safeName(s.BlobID) {
		return s.BlobID
	}
	return ""
}

// isHex reports whether s holds exactly n hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// infoURL returns the URL of the revision listing.
func infoURL(endpoint, repo, rev string) string {
	return endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(rev) + "?blobs=true"
}

// resolveURL returns the download URL of one file at a revision.
func resolveURL(endpoint, repo, rev, file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return endpoint + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + strings.Join(segs, "/")
}

// newRequest builds a hub request with the token and user agent set.
func newRequest(ctx context.Context, method, u string, opt Options) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("hub: request %s: %w", u, err)
	}
	req.Header.Set("User-Agent", userAgent)
	if opt.Token != "" {
		req.Header.Set("Authorization", "Bearer "+opt.Token)
	}
	return req, nil
}

// fetchInfo asks the hub for the commit and file listing of ref at rev.
func fetchInfo(ctx context.Context, ref Ref, rev string, opt Options) (repoInfo, error) {
	u := infoURL(opt.Endpoint, ref.Repo, rev)
	req, err := newRequest(ctx, http.MethodGet, u, opt)
	if err != nil {
		return repoInfo{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := opt.Client.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return repoInfo{}, fmt.Errorf("hub %s%s: %w", Prefix, ref.Repo, cerr)
		}
		return repoInfo{}, fmt.Errorf("hub %s%s: cannot reach %s: %w: %w", Prefix, ref.Repo, opt.Endpoint, ErrNetwork, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return repoInfo{}, statusError(ref, rev, "repository", resp, opt.Token != "")
	}
	var info repoInfo
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxInfoBytes))
	if err := dec.Decode(&info); err != nil {
		return repoInfo{}, fmt.Errorf("hub %s%s: revision %q: bad listing from %s: %w", Prefix, ref.Repo, rev, u, err)
	}
	if !safeName(info.SHA) {
		return repoInfo{}, fmt.Errorf("hub %s%s: revision %q: listing has a bad commit %q", Prefix, ref.Repo, rev, info.SHA)
	}
	for _, s := range info.Siblings {
		if err := checkFilePath(s.Name); err != nil {
			return repoInfo{}, fmt.Errorf("hub %s%s: revision %q: listing has a bad file name: %w", Prefix, ref.Repo, rev, err)
		}
	}
	return info, nil
}
