package hub

import (
	"os"
	"path/filepath"
	"testing"
)

// clearHFEnv unsets the variables OptionsFromEnv reads, for the test's duration.
func clearHFEnv(t *testing.T) {
	for _, k := range []string{"HF_ENDPOINT", "HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "HF_HUB_CACHE",
		"XDG_CACHE_HOME", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"} {
		t.Setenv(k, "")
	}
}

func TestOptionsFromEnv(t *testing.T) {
	clearHFEnv(t)
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_ENDPOINT", "http://mirror.local/")
	t.Setenv("HF_TOKEN", " hf_abc \n")
	t.Setenv("HF_HUB_OFFLINE", "1")
	opt := OptionsFromEnv()
	if opt.Endpoint != "http://mirror.local/" || opt.Token != "hf_abc" || !opt.Offline {
		t.Errorf("got %+v", opt)
	}
	if want := filepath.Join(home, "hub"); opt.CacheDir != want {
		t.Errorf("cache %q, want %q", opt.CacheDir, want)
	}
	if opt.Progress != os.Stderr {
		t.Error("progress should default to stderr")
	}
	if d := opt.withDefaults(); d.Endpoint != "http://mirror.local" || d.Revision != "main" || d.Client == nil {
		t.Errorf("defaults: %+v", d)
	}

	t.Setenv("HF_HUB_CACHE", "/elsewhere/hub")
	t.Setenv("HF_HUB_OFFLINE", "0")
	t.Setenv("HF_HUB_DISABLE_PROGRESS_BARS", "true")
	opt = OptionsFromEnv()
	if opt.CacheDir != "/elsewhere/hub" || opt.Offline || opt.Progress != nil {
		t.Errorf("got %+v", opt)
	}
}

func TestOptionsFromEnvTokenFile(t *testing.T) {
	clearHFEnv(t)
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	if err := os.WriteFile(filepath.Join(home, "token"), []byte("hf_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := OptionsFromEnv().Token; got != "hf_fromfile" {
		t.Errorf("token %q, want the one from $HF_HOME/token", got)
	}
	t.Setenv("HF_HOME", "")
	t.Setenv("XDG_CACHE_HOME", home)
	if got, want := DefaultCacheDir(), filepath.Join(home, "huggingface", "hub"); got != want {
		t.Errorf("cache %q, want %q", got, want)
	}
}
