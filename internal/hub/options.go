package hub

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultEndpoint is the Hugging Face hub used when Options.Endpoint and HF_ENDPOINT are
// empty.
const DefaultEndpoint = "https://huggingface.co"

// Options configures Download. The zero value works: it talks to DefaultEndpoint without a
// token, uses the default cache folder and revision "main", and shows no progress.
type Options struct {
	Endpoint string       // hub base URL; "" means DefaultEndpoint
	Token    string       // access token sent as "Authorization: Bearer"; "" sends none
	CacheDir string       // hub cache folder (holding models--ORG--REPO); "" means DefaultCacheDir()
	Revision string       // used when the Ref has none; "" means "main"
	Progress io.Writer    // where progress bars and notes go (usually os.Stderr); nil for none
	Client   *http.Client // nil means a client made for this call
	Offline  bool         // resolve from the cache only, making no network request
}

// OptionsFromEnv reads the settings huggingface_hub users already have:
//
//   - HF_ENDPOINT: the hub URL (for mirrors and tests).
//   - HF_TOKEN: the access token; when unset, the token file written by
//     "huggingface-cli login" ($HF_TOKEN_PATH, default $HF_HOME/token) is read.
//   - HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
//     ~/.cache/huggingface/hub: the cache folder.
//   - HF_HUB_OFFLINE=1: resolve from the cache only.
//   - HF_HUB_DISABLE_PROGRESS_BARS=1: no progress on stderr (otherwise Progress is os.Stderr).
func OptionsFromEnv() Options {
	opt := Options{
		Endpoint: strings.TrimSpace(os.Getenv("HF_ENDPOINT")),
		Token:    strings.TrimSpace(os.Getenv("HF_TOKEN")),
		CacheDir: DefaultCacheDir(),
		Offline:  envTrue("HF_HUB_OFFLINE"),
	}
	if opt.Token == "" {
		tokenPath := os.Getenv("HF_TOKEN_PATH")
		if tokenPath == "" {
			tokenPath = filepath.Join(hfHome(), "token")
		}
		if b, err := os.ReadFile(tokenPath); err == nil {
			opt.Token = strings.TrimSpace(string(b))
		}
	}
	if !envTrue("HF_HUB_DISABLE_PROGRESS_BARS") {
		opt.Progress = os.Stderr
	}
	return opt
}

// DefaultCacheDir returns the hub cache folder named by the environment, as huggingface_hub
// finds it: HF_HUB_CACHE, else $HF_HOME/hub, with HF_HOME defaulting to
// $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface.
func DefaultCacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return expandHome(d)
	}
	return filepath.Join(hfHome(), "hub")
}

// hfHome returns $HF_HOME or its default.
func hfHome() string {
	if d := os.Getenv("HF_HOME"); d != "" {
		return expandHome(d)
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(expandHome(d), "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// expandHome replaces a leading "~/" with the user's home folder.
func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// envTrue reports whether the variable is set to 1, true, yes or on (any case).
func envTrue(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// withDefaults fills the empty fields of opt.
func (opt Options) withDefaults() Options {
	if opt.Endpoint == "" {
		opt.Endpoint = DefaultEndpoint
	}
	opt.Endpoint = strings.TrimRight(opt.Endpoint, "/")
	if opt.CacheDir == "" {
		opt.CacheDir = DefaultCacheDir()
	}
	if opt.Revision == "" {
		opt.Revision = "main"
	}
	if opt.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = time.Minute
		opt.Client = &http.Client{Transport: tr}
	}
	return opt
}
