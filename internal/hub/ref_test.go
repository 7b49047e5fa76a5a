package hub

import (
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	cases := []struct {
		in   string
		want Ref
		bad  bool
	}{
		{in: "hf:Qwen/Qwen3-0.6B", want: Ref{Repo: "Qwen/Qwen3-0.6B"}},
		{in: "hf://Qwen/Qwen3-0.6B", want: Ref{Repo: "Qwen/Qwen3-0.6B"}},
		{in: "hf:org/repo/model.gguf", want: Ref{Repo: "org/repo", File: "model.gguf"}},
		{in: "hf:org/repo/Q4_K_M/part-00001-of-00002.gguf", want: Ref{Repo: "org/repo", File: "Q4_K_M/part-00001-of-00002.gguf"}},
		{in: "hf:org/repo@v1.0", want: Ref{Repo: "org/repo", Revision: "v1.0"}},
		{in: "hf:org/repo@" + commitA + "/a@b.gguf", want: Ref{Repo: "org/repo", Revision: commitA, File: "a@b.gguf"}},
		{in: "hf:_o.r-g_/r.e-p_o", want: Ref{Repo: "_o.r-g_/r.e-p_o"}},
		{in: "hf:org/" + strings.Repeat("a", 96), want: Ref{Repo: "org/" + strings.Repeat("a", 96)}},
		{in: "org/repo", bad: true},
		{in: "hf:", bad: true},
		{in: "hf:org", bad: true},
		{in: "hf:org/", bad: true},
		{in: "hf:/repo", bad: true},
		{in: "hf:org/repo/", bad: true},
		{in: "hf:org/repo//x.gguf", bad: true},
		{in: "hf:org/repo/../x.gguf", bad: true},
		{in: "hf:org/repo/a/./x.gguf", bad: true},
		{in: "hf:org/repo/a\\b.gguf", bad: true},
		{in: "hf:org/repo/a\x00b", bad: true},
		{in: "hf:org/repo@", bad: true},
		{in: "hf:org/repo@..", bad: true},
		{in: "hf:org/repo@a b", bad: true},
		{in: "hf:org/re--po", bad: true},
		{in: "hf:org/re..po", bad: true},
		{in: "hf:org/-repo", bad: true},
		{in: "hf:org/repo.", bad: true},
		{in: "hf:o@rg/repo", bad: true},
		{in: "hf:org/re po", bad: true},
		{in: "hf:org/" + strings.Repeat("a", 97), bad: true},
	}
	for _, c := range cases {
		got, err := ParseRef(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseRef(%q) = %+v, want an error", c.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRef(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseRef(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if back, err := ParseRef(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %q gives %+v, %v", c.in, got.String(), back, err)
		}
	}
}

func TestIsRef(t *testing.T) {
	for s, want := range map[string]bool{"hf:a/b": true, "hf:": true, "./hf:a": false, "model.gguf": false, "HF:a/b": false} {
		if IsRef(s) != want {
			t.Errorf("IsRef(%q) = %v", s, !want)
		}
	}
}

// FuzzParseRef checks that ParseRef never panics, that what it accepts is safe to use as
// cache paths, and that String gives back the same Ref.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"hf:org/repo", "hf://org/repo/x.gguf", "hf:org/repo@v1/a/b.gguf",
		"hf:org/repo/../x", "hf:a/b@/c", "hf:a--b/c", "hf:org/repo/a@b", "hf:o/r@" + commitA} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseRef(s)
		if err != nil {
			return
		}
		if err := checkRef(ref); err != nil {
			t.Fatalf("ParseRef(%q) accepted %+v that checkRef rejects: %v", s, ref, err)
		}
		if strings.Count(ref.Repo, "/") != 1 || strings.Contains(ref.Repo, "..") {
			t.Fatalf("ParseRef(%q): bad repo %q", s, ref.Repo)
		}
		for _, seg := range strings.Split(ref.File, "/") {
			if ref.File != "" && (seg == "" || seg == "..") {
				t.Fatalf("ParseRef(%q): unsafe file %q", s, ref.File)
			}
		}
		if strings.Contains(ref.Revision, "/") || strings.Contains(ref.Revision, "..") {
			t.Fatalf("ParseRef(%q): unsafe revision %q", s, ref.Revision)
		}
		back, err := ParseRef(ref.String())
		if err != nil || back != ref {
			t.Fatalf("round trip %q -> %+v -> %q -> %+v, %v", s, ref, ref.String(), back, err)
		}
	})
}
