package hub

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestStatusError(t *testing.T) {
	cases := []struct {
		status   int
		code     string
		hasToken bool
		want     []error
		text     []string
	}{
		{401, "", false, []error{ErrAuth}, []string{"401", "set HF_TOKEN", "gated"}},
		{401, "RepoNotFound", false, []error{ErrAuth, ErrNotFound}, []string{"not found, or private", "HF_TOKEN"}},
		{403, "GatedRepo", true, []error{ErrAuth}, []string{"403", "refused", "accept its terms"}},
		{404, "", false, []error{ErrNotFound}, []string{"404", "not found"}},
		{404, "RevisionNotFound", false, []error{ErrNotFound}, []string{`revision "main" not found`}},
		{404, "EntryNotFound", false, []error{ErrNotFound}, []string{`file "x.gguf" not found`}},
		{503, "", false, []error{ErrNetwork}, []string{"server error"}},
		{429, "", false, []error{ErrNetwork}, []string{"rate limited"}},
		{418, "", false, nil, []string{"unexpected response"}},
	}
	for _, c := range cases {
		resp := &http.Response{StatusCode: c.status, Status: http.StatusText(c.status), Header: http.Header{}}
		if c.code != "" {
			resp.Header.Set("X-Error-Code", c.code)
			resp.Header.Set("X-Error-Message", "from the hub")
		}
		err := statusError(Ref{Repo: "o/r"}, "main", `file "x.gguf"`, resp, c.hasToken)
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("%d %s: %v is not %v", c.status, c.code, err, w)
			}
		}
		for _, s := range c.text {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%d %s: %q lacks %q", c.status, c.code, err, s)
			}
		}
		if c.code != "" && !strings.Contains(err.Error(), "from the hub") {
			t.Errorf("%d %s: hub message dropped: %v", c.status, c.code, err)
		}
	}
}
