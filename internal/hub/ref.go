package hub

import (
	"fmt"
	"strings"
)

// Prefix marks a model argument as a Hugging Face hub reference ("hf:ORG/REPO").
const Prefix = "hf:"

// Ref names what to fetch from the hub: a repository, optionally one file in it and
// optionally a revision.
type Ref struct {
	Repo     string // "ORG/REPO"
	File     string // path inside the repository, "" to pick what a model needs
	Revision string // branch, tag or commit; "" means Options.Revision, then "main"
}

// IsRef reports whether s is meant as a hub reference (it starts with "hf:"), as opposed to
// a local path. It does not validate the rest; ParseRef does.
func IsRef(s string) bool { return strings.HasPrefix(s, Prefix) }

// ParseRef parses a hub reference of the form
//
//	hf:ORG/REPO[@REVISION][/FILE]
//
// for example "hf:Qwen/Qwen3-0.6B", "hf:ggml-org/models/tinyllamas/stories260K.gguf" or
// "hf:TheOrg/some-model@v1.0/model-Q4_0.gguf". "hf://" is accepted in place of "hf:".
// FILE may hold folders ("dir/model.gguf"). REVISION (a branch, tag or commit hash) cannot
// contain "/" in this form; pass such revisions (like "refs/pr/1") through Options.Revision.
// ORG and REPO follow the hub's naming rules: letters, digits, '-', '_' and '.', at most 96
// characters, starting and ending with a letter, digit or '_', with no "--" or "..".
func ParseRef(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return Ref{}, fmt.Errorf("hub ref %q: must start with %q (hf:ORG/REPO[@REVISION][/FILE])", s, Prefix)
	}
	rest = strings.TrimPrefix(rest, "//")
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return Ref{}, fmt.Errorf("hub ref %q: want hf:ORG/REPO[@REVISION][/FILE]", s)
	}
	org, repo := parts[0], parts[1]
	var ref Ref
	if name, rev, found := strings.Cut(repo, "@"); found {
		repo = name
		if err := checkRevision(rev, false); err != nil {
			return Ref{}, fmt.Errorf("hub ref %q: %w", s, err)
		}
		ref.Revision = rev
	}
	if err := checkRepoPart(org); err != nil {
		return Ref{}, fmt.Errorf("hub ref %q: organization: %w", s, err)
	}
	if err := checkRepoPart(repo); err != nil {
		return Ref{}, fmt.Errorf("hub ref %q: repository: %w", s, err)
	}
	ref.Repo = org + "/" + repo
	if len(parts) == 3 {
		if err := checkFilePath(parts[2]); err != nil {
			return Ref{}, fmt.Errorf("hub ref %q: file: %w", s, err)
		}
		ref.File = parts[2]
	}
	return ref, nil
}

// String formats r back into the form ParseRef accepts.
func (r Ref) String() string {
	var b strings.Builder
	b.WriteString(Prefix)
	b.WriteString(r.Repo)
	if r.Revision != "" {
		b.WriteByte('@')
		b.WriteString(r.Revision)
	}
	if r.File != "" {
		b.WriteByte('/')
		b.WriteString(r.File)
	}
	return b.String()
}

// checkRepoPart validates an organization or repository name.
func checkRepoPart(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty name")
	case len(s) > 96:
		return fmt.Errorf("name %q longer than 96 characters", s)
	case strings.Contains(s, "--") || strings.Contains(s, ".."):
		return fmt.Errorf("name %q contains \"--\" or \"..\"", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		word := c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if word {
			continue
		}
		if (c == '-' || c == '.') && i > 0 && i < len(s)-1 {
			continue
		}
		return fmt.Errorf("name %q: character %q not allowed here", s, c)
	}
	return nil
}

// checkFilePath validates a path inside a repository so that it can be joined under a
// snapshot folder safely: relative, "/"-separated, no empty, "." or ".." segments, no
// backslashes or control characters.
func checkFilePath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if len(p) > 1024 {
		return fmt.Errorf("path longer than 1024 bytes")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %q: bad segment %q", p, seg)
		}
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || c == '\\' || c == 0xfffd {
			return fmt.Errorf("path %q: character %q not allowed", p, c)
		}
	}
	return nil
}

// checkRevision validates a branch, tag or commit name. With allowSlash, "/" may separate
// non-empty segments (as in "refs/pr/1"); the revision is also used as a path under refs/.
func checkRevision(rev string, allowSlash bool) error {
	if rev == "" {
		return fmt.Errorf("empty revision")
	}
	if len(rev) > 256 {
		return fmt.Errorf("revision longer than 256 bytes")
	}
	if !allowSlash && strings.Contains(rev, "/") {
		return fmt.Errorf("revision %q contains '/' (use --revision for such revisions)", rev)
	}
	if strings.Contains(rev, "..") {
		// git forbids ".." anywhere in a ref name (git check-ref-format).
		return fmt.Errorf("revision %q contains \"..\"", rev)
	}
	for _, seg := range strings.Split(rev, "/") {
		if seg == "" || seg == "." {
			return fmt.Errorf("revision %q: bad segment %q", rev, seg)
		}
	}
	for _, c := range rev {
		if c <= ' ' || c == 0x7f || c == '\\' || c == '@' || c == ':' || c == '?' || c == '#' || c == '%' || c == 0xfffd {
			return fmt.Errorf("revision %q: character %q not allowed", rev, c)
		}
	}
	return nil
}

// isCommit reports whether rev looks like a full git commit hash (40 lowercase hex digits).
func isCommit(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for i := 0; i < len(rev); i++ {
		c := rev[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// safeName reports whether s can be used as one file name component (blob ids, commits).
func safeName(s string) bool {
	if s == "" || len(s) > 200 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
