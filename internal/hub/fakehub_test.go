package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeFile is one file of a fake repository.
type fakeFile struct {
	data   []byte
	lfs    bool   // stored with LFS: listed with sha256, served through a /cdn/ redirect
	badSHA string // when set, the listing announces this sha256 instead of the real one
}

// fakeRepo is one repository of the fake hub, with a single commit that "main" points at.
type fakeRepo struct {
	commit string
	files  map[string]fakeFile
	gated  bool // downloads (not the listing) need the hub's token
}

// fakeHub mimics the hub endpoints Download uses: the revision listing and resolve URLs
// (with LFS redirects to a CDN path, Range support, X-Error-Code headers).
type fakeHub struct {
	srv   *httptest.Server
	token string // the one valid token
	repos map[string]*fakeRepo

	mu          sync.Mutex
	noBlobIDs   bool           // leave blobId and lfs out of the listing
	noETag      bool           // send no ETag on direct downloads
	ignoreRange bool           // answer Range requests with the whole file
	truncate    map[string]int // file name -> responses still to cut off halfway
	fail503     int            // blob requests still to answer with 503
	apiCalls    int
	blobCalls   int      // GET resolve and CDN requests
	ranges      []string // Range headers of blob requests, "" for none
	auths       []string // Authorization headers of all requests
}

// newFakeHub starts a fake hub with the given repositories ("org/repo" -> repo).
func newFakeHub(t *testing.T, repos map[string]*fakeRepo) *fakeHub {
	t.Helper()
	h := &fakeHub{token: "hf_good", repos: repos, truncate: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

// sha256Hex returns the hex sha256 of b.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// gitOID returns the git blob id of b.
func gitOID(b []byte) string {
	s := sha256.Sum256(append([]byte("blob "+strconv.Itoa(len(b))+"\x00"), b...))
	return hex.EncodeToString(s[:20])
}

// counts returns the API and blob request counts so far.
func (h *fakeHub) counts() (api, blob int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.apiCalls, h.blobCalls
}

// segments splits the escaped request path into unescaped segments.
func segments(r *http.Request) []string {
	var out []string
	for _, s := range strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/") {
		u, err := url.PathUnescape(s)
		if err != nil {
			u = s
		}
		out = append(out, u)
	}
	return out
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auths = append(h.auths, r.Header.Get("Authorization"))
	h.mu.Unlock()
	seg := segments(r)
	switch {
	case len(seg) >= 6 && seg[0] == "api" && seg[1] == "models" && seg[4] == "revision":
		h.serveInfo(w, r, seg[2]+"/"+seg[3], strings.Join(seg[5:], "/"))
	case len(seg) >= 5 && seg[2] == "resolve":
		h.serveResolve(w, r, seg[0]+"/"+seg[1], seg[3], strings.Join(seg[4:], "/"))
	case len(seg) == 4 && seg[0] == "cdn":
		h.serveCDN(w, r, seg[1]+"/"+seg[2], seg[3])
	default:
		http.NotFound(w, r)
	}
}

// lookup finds a repository and the commit a revision names, writing the hub's 404 when
// either is unknown.
func (h *fakeHub) lookup(w http.ResponseWriter, repo, rev string) (*fakeRepo, bool) {
	fr, ok := h.repos[repo]
	if !ok {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		w.Header().Set("X-Error-Message", "Repository not found")
		http.Error(w, "not found", http.StatusNotFound)
		return nil, false
	}
	if rev != "main" && rev != fr.commit && rev != "refs/pr/1" {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "not found", http.StatusNotFound)
		return nil, false
	}
	return fr, true
}

func (h *fakeHub) serveInfo(w http.ResponseWriter, r *http.Request, repo, rev string) {
	h.mu.Lock()
	h.apiCalls++
	noBlobIDs := h.noBlobIDs
	h.mu.Unlock()
	fr, ok := h.lookup(w, repo, rev)
	if !ok {
		return
	}
	type lfs struct {
		SHA256 string `json:"sha256"`
		Size   int    `json:"size"`
	}
	type sib struct {
		Name   string `json:"rfilename"`
		Size   *int   `json:"size,omitempty"`
		BlobID string `json:"blobId,omitempty"`
		LFS    *lfs   `json:"lfs,omitempty"`
	}
	info := struct {
		ID       string `json:"id"`
		SHA      string `json:"sha"`
		Siblings []sib  `json:"siblings"`
	}{ID: repo, SHA: fr.commit}
	names := make([]string, 0, len(fr.files))
	for n := range fr.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := fr.files[n]
		s := sib{Name: n}
		if !noBlobIDs && r.URL.Query().Get("blobs") == "true" {
			size := len(f.data)
			s.Size = &size
			s.BlobID = gitOID(f.data)
			if f.lfs {
				sum := sha256Hex(f.data)
				if f.badSHA != "" {
					sum = f.badSHA
				}
				s.LFS = &lfs{SHA256: sum, Size: len(f.data)}
			}
		}
		info.Siblings = append(info.Siblings, s)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(info)
}

// authorized applies the gated-repo rules: 401 without a token, 403 with a wrong one.
func (h *fakeHub) authorized(w http.ResponseWriter, r *http.Request, fr *fakeRepo) bool {
	if !fr.gated {
		return true
	}
	switch r.Header.Get("Authorization") {
	case "Bearer " + h.token:
		return true
	case "":
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "gated", http.StatusUnauthorized)
	default:
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "gated", http.StatusForbidden)
	}
	return false
}

func (h *fakeHub) serveResolve(w http.ResponseWriter, r *http.Request, repo, rev, file string) {
	fr, ok := h.lookup(w, repo, rev)
	if !ok || !h.authorized(w, r, fr) {
		return
	}
	f, ok := fr.files[file]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "entry not found", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", fr.commit)
	if f.lfs {
		w.Header().Set("X-Linked-Etag", `"`+sha256Hex(f.data)+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
		http.Redirect(w, r, "/cdn/"+repo+"/"+sha256Hex(f.data), http.StatusFound)
		return
	}
	h.mu.Lock()
	noETag := h.noETag
	h.mu.Unlock()
	if !noETag {
		w.Header().Set("ETag", `W/"`+gitOID(f.data)+`"`)
	}
	h.sendBlob(w, r, file, f.data)
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, repo, sum string) {
	fr, ok := h.repos[repo]
	if !ok {
		http.NotFound(w, r)
		return
	}
	for name, f := range fr.files {
		if f.lfs && sha256Hex(f.data) == sum {
			w.Header().Set("ETag", `"cdn-`+sum[:8]+`"`)
			h.sendBlob(w, r, name, f.data)
			return
		}
	}
	http.NotFound(w, r)
}

// sendBlob writes data, honouring "Range: bytes=N-" and cutting off the responses that
// h.truncate asks for.
func (h *fakeHub) sendBlob(w http.ResponseWriter, r *http.Request, name string, data []byte) {
	h.mu.Lock()
	h.blobCalls++
	h.ranges = append(h.ranges, r.Header.Get("Range"))
	cut := h.truncate[name] > 0
	if cut {
		h.truncate[name]--
	}
	ignoreRange := h.ignoreRange
	fail := h.fail503 > 0
	if fail {
		h.fail503--
	}
	h.mu.Unlock()
	if fail {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	start := 0
	if rg := r.Header.Get("Range"); rg != "" && !ignoreRange {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n < 0 || n >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			http.Error(w, "range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(data)-1, len(data)))
	}
	body := data[start:]
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Accept-Ranges", "bytes")
	if start > 0 {
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	if cut {
		w.Write(body[:len(body)/2]) // the server closes the connection: an unexpected EOF
		return
	}
	w.Write(body)
}
