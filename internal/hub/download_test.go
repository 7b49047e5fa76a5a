package hub

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const commitA = "0123456789abcdef0123456789abcdef01234567"

// payload returns n deterministic bytes.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// testOptions points Download at the fake hub with a fresh cache.
func testOptions(t *testing.T, h *fakeHub) Options {
	t.Helper()
	return Options{Endpoint: h.srv.URL, CacheDir: t.TempDir(), Client: h.srv.Client()}
}

// ggufRepo is a repository with one GGUF model beside small git files.
func ggufRepo() *fakeRepo {
	return &fakeRepo{commit: commitA, files: map[string]fakeFile{
		"model-Q4_0.gguf": {data: payload(300_000, 1), lfs: true},
		"README.md":       {data: []byte("# a model\n")},
		".gitattributes":  {data: []byte("*.gguf filter=lfs\n")},
	}}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t *testing.T, s string) Ref {
	t.Helper()
	r, err := ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDownloadSingleGGUF(t *testing.T) {
	repo := ggufRepo()
	h := newFakeHub(t, map[string]*fakeRepo{"org/model-GGUF": repo})
	opt := testOptions(t, h)
	var progress bytes.Buffer
	opt.Progress = &progress

	got, err := Download(context.Background(), mustParse(t, "hf:org/model-GGUF"), opt)
	if err != nil {
		t.Fatal(err)
	}
	data := repo.files["model-Q4_0.gguf"].data
	repoDir := filepath.Join(opt.CacheDir, "models--org--model-GGUF")
	want := filepath.Join(repoDir, "snapshots", commitA, "model-Q4_0.gguf")
	if got != want {
		t.Fatalf("path %q, want %q", got, want)
	}
	if !bytes.Equal(mustRead(t, got), data) {
		t.Fatal("content differs")
	}
	// Layout: a relative symlink into blobs/<sha256>, refs/main holding the commit.
	link, err := os.Readlink(got)
	if err != nil {
		t.Fatalf("snapshot entry is not a symlink: %v", err)
	}
	if wantLink := "../../blobs/" + sha256Hex(data); link != wantLink {
		t.Errorf("link %q, want %q", link, wantLink)
	}
	if ref := string(mustRead(t, filepath.Join(repoDir, "refs", "main"))); ref != commitA {
		t.Errorf("refs/main = %q, want %q", ref, commitA)
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(blobs) != 1 || blobs[0].Name() != sha256Hex(data) {
		t.Errorf("blobs = %v, want only the GGUF's sha256 (README etc. not fetched)", blobs)
	}
	if _, blob := h.counts(); blob != 1 {
		t.Errorf("%d blob requests, want 1", blob)
	}
	if !strings.Contains(progress.String(), "model-Q4_0.gguf") {
		t.Errorf("no progress shown: %q", progress.String())
	}
}

func TestDownloadSafetensorsSelection(t *testing.T) {
	index := `{"metadata":{},"weight_map":{"a.weight":"model-00001-of-00002.safetensors","b.weight":"model-00002-of-00002.safetensors"}}`
	repo := &fakeRepo{commit: commitA, files: map[string]fakeFile{
		"config.json":                      {data: []byte(`{"model_type":"llama"}`)},
		"generation_config.json":           {data: []byte(`{}`)},
		"tokenizer.json":                   {data: payload(5000, 2)},
		"tokenizer_config.json":            {data: []byte(`{}`)},
		"model.safetensors.index.json":     {data: []byte(index)},
		"model-00001-of-00002.safetensors": {data: payload(70_000, 3), lfs: true},
		"model-00002-of-00002.safetensors": {data: payload(50_000, 4), lfs: true},
		"consolidated.safetensors":         {data: payload(120_000, 5), lfs: true}, // not in the index
		"pytorch_model.bin":                {data: payload(1000, 6), lfs: true},
		"onnx/model.onnx":                  {data: payload(1000, 7), lfs: true},
		"README.md":                        {data: []byte("hi")},
	}}
	h := newFakeHub(t, map[string]*fakeRepo{"org/st": repo})
	opt := testOptions(t, h)
	got, err := Download(context.Background(), mustParse(t, "hf:org/st"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(opt.CacheDir, "models--org--st", "snapshots", commitA); got != want {
		t.Fatalf("path %q, want the snapshot folder %q", got, want)
	}
	var files []string
	filepath.WalkDir(got, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(got, p)
			files = append(files, rel)
		}
		return nil
	})
	want := []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(files, want) {
		t.Fatalf("snapshot holds %v, want %v", files, want)
	}
	for _, f := range files {
		if !bytes.Equal(mustRead(t, filepath.Join(got, f)), repo.files[f].data) {
			t.Errorf("%s: content differs", f)
		}
	}
	// Small git files are named by their git blob id, as huggingface_hub does.
	link, _ := os.Readlink(filepath.Join(got, "config.json"))
	if want := "../../blobs/" + gitOID(repo.files["config.json"].data); link != want {
		t.Errorf("config.json -> %q, want %q", link, want)
	}
}

func TestDownloadFileInFolder(t *testing.T) {
	repo := &fakeRepo{commit: commitA, files: map[string]fakeFile{
		"Q4/part.gguf": {data: payload(1000, 1), lfs: true},
		"Q8/part.gguf": {data: payload(2000, 2), lfs: true},
	}}
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	got, err := Download(context.Background(), mustParse(t, "hf:org/m/Q8/part.gguf"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, got), repo.files["Q8/part.gguf"].data) {
		t.Fatal("content differs")
	}
	link, _ := os.Readlink(got)
	if want := "../../../blobs/" + sha256Hex(repo.files["Q8/part.gguf"].data); link != want {
		t.Errorf("link %q, want %q", link, want)
	}
}

func TestDownloadSeveralGGUF(t *testing.T) {
	repo := &fakeRepo{commit: commitA, files: map[string]fakeFile{
		"m-Q4_0.gguf":               {data: payload(100, 1), lfs: true},
		"m-Q8_0.gguf":               {data: payload(200, 2), lfs: true},
		"big-00001-of-00002.gguf":   {data: payload(300, 3), lfs: true},
		"big-00002-of-00002.gguf":   {data: payload(400, 4), lfs: true},
		"mmproj-m-f16.gguf":         {data: payload(50, 5), lfs: true},
		"pytorch_model.bin":         {data: payload(10, 6), lfs: true},
		"other/README_unrelated.md": {data: []byte("x")},
	}}
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	_, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if !errors.Is(err, ErrChoice) {
		t.Fatalf("err = %v, want ErrChoice", err)
	}
	for _, s := range []string{"hf:org/m/m-Q4_0.gguf", "hf:org/m/m-Q8_0.gguf", "hf:org/m/big-00001-of-00002.gguf"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not list %s: %v", s, err)
		}
	}
	if strings.Contains(err.Error(), "mmproj") || strings.Contains(err.Error(), "00002-of") {
		t.Errorf("error lists a projector or a later split part: %v", err)
	}
	if _, blob := h.counts(); blob != 0 {
		t.Errorf("%d blob requests before choosing, want 0", blob)
	}

	// Naming a split part fetches every part and returns the first.
	got, err := Download(context.Background(), mustParse(t, "hf:org/m/big-00001-of-00002.gguf"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(got) != "big-00001-of-00002.gguf" {
		t.Errorf("path %q, want the first part", got)
	}
	second := filepath.Join(filepath.Dir(got), "big-00002-of-00002.gguf")
	if !bytes.Equal(mustRead(t, second), repo.files["big-00002-of-00002.gguf"].data) {
		t.Error("second part missing or wrong")
	}
}

func TestResumeAfterTruncatedTransfer(t *testing.T) {
	repo := ggufRepo()
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	h.truncate["model-Q4_0.gguf"] = 1
	opt := testOptions(t, h)
	got, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if err != nil {
		t.Fatal(err)
	}
	data := repo.files["model-Q4_0.gguf"].data
	if !bytes.Equal(mustRead(t, got), data) {
		t.Fatal("content differs after resume")
	}
	h.mu.Lock()
	ranges := slices.Clone(h.ranges)
	h.mu.Unlock()
	want := []string{"", "bytes=150000-"}
	if !slices.Equal(ranges, want) {
		t.Errorf("blob requests with Range %q, want %q", ranges, want)
	}
}

func TestRetryOnServerError(t *testing.T) {
	repo := ggufRepo()
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	h.fail503 = 2
	got, err := Download(context.Background(), mustParse(t, "hf:org/m"), testOptions(t, h))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, got), repo.files["model-Q4_0.gguf"].data) {
		t.Fatal("content differs")
	}
	if _, blob := h.counts(); blob != 3 {
		t.Errorf("%d blob requests, want 3 (two 503s, then the file)", blob)
	}
}

func TestResumeFromPartialFile(t *testing.T) {
	repo := ggufRepo()
	data := repo.files["model-Q4_0.gguf"].data
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)

	// A first attempt that failed for good (every try cut off) leaves the partial blob.
	h.truncate["model-Q4_0.gguf"] = maxAttempts
	_, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if !errors.Is(err, ErrNetwork) {
		t.Fatalf("err = %v, want ErrNetwork", err)
	}
	part := filepath.Join(opt.CacheDir, "models--org--m", "blobs", sha256Hex(data)+".incomplete")
	n := fileSize(part)
	if n <= 0 || n >= int64(len(data)) {
		t.Fatalf("partial file has %d bytes", n)
	}
	// The next run continues from there.
	h.mu.Lock()
	h.ranges = nil
	h.mu.Unlock()
	got, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, got), data) {
		t.Fatal("content differs")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ranges) != 1 || h.ranges[0] != "bytes="+strconv.FormatInt(n, 10)+"-" {
		t.Errorf("ranges %q, want one from byte %d", h.ranges, n)
	}
	if fileSize(part) >= 0 {
		t.Error(".incomplete left behind")
	}
}

func TestResumeServerIgnoresRange(t *testing.T) {
	repo := ggufRepo()
	data := repo.files["model-Q4_0.gguf"].data
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	h.ignoreRange = true
	opt := testOptions(t, h)
	blobs := filepath.Join(opt.CacheDir, "models--org--m", "blobs")
	os.MkdirAll(blobs, 0o755)
	os.WriteFile(filepath.Join(blobs, sha256Hex(data)+".incomplete"), data[:1234], 0o644)
	got, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, got), data) {
		t.Fatal("content differs when the server sends the whole file")
	}
}

func TestCorruptPartialIsDiscarded(t *testing.T) {
	repo := ggufRepo()
	data := repo.files["model-Q4_0.gguf"].data
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	blobs := filepath.Join(opt.CacheDir, "models--org--m", "blobs")
	os.MkdirAll(blobs, 0o755)
	part := filepath.Join(blobs, sha256Hex(data)+".incomplete")
	os.WriteFile(part, payload(1000, 99), 0o644) // wrong bytes
	_, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("err = %v, want ErrChecksum", err)
	}
	if fileSize(part) >= 0 {
		t.Fatal("corrupt partial kept")
	}
	if _, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt); err != nil {
		t.Fatalf("retry after discarding: %v", err)
	}
}

func TestReuseMakesNoBlobRequests(t *testing.T) {
	repo := ggufRepo()
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	ref := mustParse(t, "hf:org/m")
	first, err := Download(context.Background(), ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	_, blob1 := h.counts()
	second, err := Download(context.Background(), ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, blob2 := h.counts(); blob2 != blob1 {
		t.Errorf("second download made %d blob requests, want 0", blob2-blob1)
	}
	if first != second {
		t.Errorf("paths differ: %q, %q", first, second)
	}
	// With the snapshot entry gone but the blob there, the link is remade without a request.
	os.Remove(first)
	if _, err := Download(context.Background(), ref, opt); err != nil {
		t.Fatal(err)
	}
	if _, blob3 := h.counts(); blob3 != blob1 {
		t.Errorf("relinking made %d blob requests, want 0", blob3-blob1)
	}
	if _, err := os.Readlink(first); err != nil {
		t.Errorf("link not remade: %v", err)
	}
	// A file pinned to a commit that is cached needs no request at all.
	api0, _ := h.counts()
	if _, err := Download(context.Background(), mustParse(t, "hf:org/m@"+commitA+"/model-Q4_0.gguf"), opt); err != nil {
		t.Fatal(err)
	}
	if api1, _ := h.counts(); api1 != api0 {
		t.Errorf("pinned cached file made %d API requests, want 0", api1-api0)
	}
}

func TestChecksumMismatch(t *testing.T) {
	repo := ggufRepo()
	f := repo.files["model-Q4_0.gguf"]
	f.badSHA = strings.Repeat("ab", 32)
	repo.files["model-Q4_0.gguf"] = f
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	_, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("err = %v, want a sha256 ErrChecksum", err)
	}
	repoDir := filepath.Join(opt.CacheDir, "models--org--m")
	if blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs")); len(blobs) != 0 {
		t.Errorf("blobs left after a checksum failure: %v", blobs)
	}
	if fileSize(filepath.Join(repoDir, "snapshots", commitA, "model-Q4_0.gguf")) >= 0 {
		t.Error("snapshot entry made for a bad file")
	}
	if _, blob := h.counts(); blob != 1 {
		t.Errorf("%d blob requests, want 1 (no retry on a checksum error)", blob)
	}
}

func TestGatedRepo(t *testing.T) {
	repo := ggufRepo()
	repo.gated = true
	h := newFakeHub(t, map[string]*fakeRepo{"org/gated": repo})
	opt := testOptions(t, h)
	ref := mustParse(t, "hf:org/gated")

	_, err := Download(context.Background(), ref, opt)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("no token: err = %v, want ErrAuth", err)
	}
	for _, s := range []string{"401", "HF_TOKEN", "gated", "huggingface.co/org/gated"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("no token: message lacks %q: %v", s, err)
		}
	}

	opt.Token = "hf_wrong"
	_, err = Download(context.Background(), ref, opt)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("wrong token: err = %v", err)
	}

	opt.Token = h.token
	if _, err := Download(context.Background(), ref, opt); err != nil {
		t.Fatalf("good token: %v", err)
	}
	h.mu.Lock()
	last := h.auths[len(h.auths)-1]
	h.mu.Unlock()
	if last != "Bearer "+h.token {
		t.Errorf("Authorization %q", last)
	}
}

func TestNotFound(t *testing.T) {
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": ggufRepo()})
	opt := testOptions(t, h)
	cases := []struct {
		ref  string
		rev  string
		want []string
	}{
		{"hf:org/missing", "", []string{"hf:org/missing", "not found", "404"}},
		{"hf:org/m/nope.gguf", "", []string{`"nope.gguf"`, "not in the repository", "model-Q4_0.gguf"}},
		{"hf:org/m@v9", "", []string{`revision "v9"`, "not found"}},
		{"hf:org/m", "dev", []string{`revision "dev"`}},
	}
	for _, c := range cases {
		o := opt
		o.Revision = c.rev
		_, err := Download(context.Background(), mustParse(t, c.ref), o)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", c.ref, err)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: message lacks %q: %v", c.ref, s, err)
			}
		}
	}
}

func TestOffline(t *testing.T) {
	repo := ggufRepo()
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	ref := mustParse(t, "hf:org/m")

	off := opt
	off.Offline = true
	if _, err := Download(context.Background(), ref, off); !errors.Is(err, ErrNotCached) {
		t.Fatalf("offline before download: err = %v, want ErrNotCached", err)
	}
	online, err := Download(context.Background(), ref, opt)
	if err != nil {
		t.Fatal(err)
	}
	api0, blob0 := h.counts()
	for _, r := range []string{"hf:org/m", "hf:org/m/model-Q4_0.gguf", "hf:org/m@" + commitA} {
		got, err := Download(context.Background(), mustParse(t, r), off)
		if err != nil {
			t.Fatalf("offline %s: %v", r, err)
		}
		if got != online {
			t.Errorf("offline %s = %q, want %q", r, got, online)
		}
	}
	if _, err := Download(context.Background(), mustParse(t, "hf:org/m/README.md"), off); !errors.Is(err, ErrNotCached) {
		t.Errorf("offline uncached file: err = %v, want ErrNotCached", err)
	}
	if api1, blob1 := h.counts(); api1 != api0 || blob1 != blob0 {
		t.Errorf("offline mode made requests: api %d, blob %d", api1-api0, blob1-blob0)
	}

	// An unreachable hub falls back to the cache.
	h.srv.Close()
	var note bytes.Buffer
	opt.Progress = &note
	got, err := Download(context.Background(), ref, opt)
	if err != nil || got != online {
		t.Fatalf("unreachable hub: %q, %v; want the cached %q", got, err, online)
	}
	if !strings.Contains(note.String(), "cached") {
		t.Errorf("no note about using the cache: %q", note.String())
	}
	other := opt
	other.CacheDir = t.TempDir()
	if _, err := Download(context.Background(), ref, other); !errors.Is(err, ErrNetwork) {
		t.Errorf("unreachable hub, empty cache: err = %v, want ErrNetwork", err)
	}
}

func TestListingWithoutBlobIDs(t *testing.T) {
	for _, noETag := range []bool{false, true} {
		repo := &fakeRepo{commit: commitA, files: map[string]fakeFile{
			"small.gguf": {data: payload(777, 1)},
		}}
		h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
		h.noBlobIDs, h.noETag = true, noETag
		opt := testOptions(t, h)
		got, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt)
		if err != nil {
			t.Fatal(err)
		}
		data := repo.files["small.gguf"].data
		if !bytes.Equal(mustRead(t, got), data) {
			t.Fatal("content differs")
		}
		want := gitOID(data) // from the ETag
		if noETag {
			want = sha256Hex(data)
		}
		if link, _ := os.Readlink(got); link != "../../blobs/"+want {
			t.Errorf("noETag=%v: link %q, want blob %s", noETag, link, want)
		}
	}
}

func TestRevisionWithSlash(t *testing.T) {
	repo := ggufRepo()
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": repo})
	opt := testOptions(t, h)
	opt.Revision = "refs/pr/1"
	if _, err := Download(context.Background(), mustParse(t, "hf:org/m"), opt); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(opt.CacheDir, "models--org--m", "refs", "refs", "pr", "1")
	if got := string(mustRead(t, ref)); got != commitA {
		t.Errorf("refs/refs/pr/1 = %q", got)
	}
}

func TestDownloadRejectsBadInput(t *testing.T) {
	opt := Options{Endpoint: "http://127.0.0.1:1", CacheDir: t.TempDir(), Offline: true}
	for _, ref := range []Ref{
		{Repo: "noslash"},
		{Repo: "org/../x"},
		{Repo: "org/m", File: "../../etc/passwd"},
		{Repo: "org/m", Revision: "../x"},
	} {
		if _, err := Download(context.Background(), ref, opt); err == nil || errors.Is(err, ErrNotCached) {
			t.Errorf("%+v: err = %v, want a validation error", ref, err)
		}
	}
}

func TestCancel(t *testing.T) {
	h := newFakeHub(t, map[string]*fakeRepo{"org/m": ggufRepo()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Download(ctx, mustParse(t, "hf:org/m"), testOptions(t, h))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
