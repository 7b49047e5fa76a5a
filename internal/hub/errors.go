package hub

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Errors that Download wraps, for errors.Is.
var (
	// ErrNotFound: the repository, revision or file does not exist (HTTP 404, or a file
	// missing from the repository's listing).
	ErrNotFound = errors.New("not found")
	// ErrAuth: the hub refused access (HTTP 401 or 403): a private or gated repository.
	ErrAuth = errors.New("access denied")
	// ErrChecksum: a downloaded file's size or sha256 differs from what the hub announced.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrNetwork: the hub could not be reached or the transfer broke off.
	ErrNetwork = errors.New("network error")
	// ErrNotCached: offline mode and the wanted files are not in the local cache.
	ErrNotCached = errors.New("not in the local cache")
	// ErrChoice: the repository holds several models; the reference must name one file.
	ErrChoice = errors.New("ambiguous model")
)

// statusError turns a failed hub response into an error that says what to do.
// what names the thing asked for ("repository", "file \"x\"").
func statusError(ref Ref, rev, what string, resp *http.Response, hasToken bool) error {
	code := resp.Header.Get("X-Error-Code")
	msg := strings.TrimSpace(resp.Header.Get("X-Error-Message"))
	detail := ""
	if msg != "" {
		detail = " (hub says: " + msg + ")"
	}
	repo := Prefix + ref.Repo
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if code == "RepoNotFound" {
			return fmt.Errorf("hub %s: repository not found, or private (HTTP %d)%s: check the name; for a private repository set HF_TOKEN to an access token that can read it: %w (%w)",
				repo, resp.StatusCode, detail, ErrNotFound, ErrAuth)
		}
		hint := "set HF_TOKEN to a Hugging Face access token (https://huggingface.co/settings/tokens)"
		if hasToken {
			hint = "the token in HF_TOKEN was refused or cannot read this repository; check it"
		}
		return fmt.Errorf("hub %s: %s: access denied (HTTP %d)%s: the repository is gated or private; accept its terms on https://huggingface.co/%s and %s: %w",
			repo, what, resp.StatusCode, detail, ref.Repo, hint, ErrAuth)
	case resp.StatusCode == http.StatusNotFound:
		switch code {
		case "RevisionNotFound":
			return fmt.Errorf("hub %s: revision %q not found%s: %w", repo, rev, detail, ErrNotFound)
		case "EntryNotFound":
			return fmt.Errorf("hub %s: %s not found at revision %q%s: %w", repo, what, rev, detail, ErrNotFound)
		}
		return fmt.Errorf("hub %s: %s not found (HTTP 404)%s: check the repository name and revision %q; private repositories also need HF_TOKEN: %w",
			repo, what, detail, rev, ErrNotFound)
	case resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("hub %s: %s: rate limited (HTTP 429)%s; an HF_TOKEN raises the limit: %w", repo, what, detail, ErrNetwork)
	case resp.StatusCode >= 500:
		return fmt.Errorf("hub %s: %s: server error %s%s: %w", repo, what, resp.Status, detail, ErrNetwork)
	}
	return fmt.Errorf("hub %s: %s: unexpected response %s%s", repo, what, resp.Status, detail)
}
