package jsonschema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// suiteGroup is one schema of the JSON-Schema-Test-Suite with its instances.
type suiteGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// keywordTally counts one suite file's outcomes.
type keywordTally struct {
	groups, refused                    int
	valid, accepted, invalid, rejected int
}

// TestSuite runs the JSON-Schema-Test-Suite (draft2020-12 and draft7) through the compiler
// and the grammar engine's matcher: every invalid instance of a compiled schema must be
// rejected (the grammar never admits what the schema forbids); valid instances should be
// accepted, and the test fails on keywords whose valid instances are accepted below the
// floor recorded for them. Refused schemas are counted per keyword; no unsupported keyword
// may compile.
func TestSuite(t *testing.T) {
	for _, draft := range []string{"draft2020-12", "draft7"} {
		dir := testdataSuite(t, draft)
		files, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		var report strings.Builder
		fmt.Fprintf(&report, "%s\n| keyword | schemas | refused | valid accepted | invalid rejected |\n| --- | --- | --- | --- | --- |\n", draft)
		sort.Strings(files)
		valid, accepted := 0, 0
		for _, file := range files {
			kw := strings.TrimSuffix(filepath.Base(file), ".json")
			tally := runSuiteFile(t, file, draft)
			valid, accepted = valid+tally.valid, accepted+tally.accepted
			if classify(kw) == unsupported && tally.refused != tally.groups {
				t.Errorf("%s/%s: %d of %d schemas using an unsupported keyword compiled", draft, kw, tally.groups-tally.refused, tally.groups)
			}
			fmt.Fprintf(&report, "| %s | %d | %d | %d/%d | %d/%d |\n", kw, tally.groups, tally.refused, tally.accepted, tally.valid, tally.rejected, tally.invalid)
		}
		t.Log("\n" + report.String())
		// The grammar writes a subset of each keyword's values (see the package doc), so
		// some valid instances are not accepted; most must be.
		if rate := float64(accepted) / float64(valid); rate < 0.9 {
			t.Errorf("%s: %d of %d valid instances accepted (%.1f%%), below 90%%", draft, accepted, valid, 100*rate)
		} else {
			t.Logf("%s: %d of %d valid instances accepted (%.1f%%)", draft, accepted, valid, 100*rate)
		}
	}
}

func testdataSuite(t *testing.T, draft string) string {
	t.Helper()
	return filepath.Join(filepath.Dir(benchSchemas(t)[0]), "..", "..", "JSON-Schema-Test-Suite", "tests", draft)
}

func runSuiteFile(t *testing.T, file, draft string) keywordTally {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var groups []suiteGroup
	if err := json.Unmarshal(data, &groups); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var tally keywordTally
	for _, g := range groups {
		tally.groups++
		schema := []byte(g.Schema)
		if draft == "draft7" {
			schema = withDraft7(schema)
		}
		gr, err := compileSchema(schema, Options{})
		if err != nil {
			tally.refused++
			continue
		}
		match, err := compileMatcher(gr.writeGBNF())
		if err != nil {
			t.Errorf("%s %q: %v", filepath.Base(file), g.Description, err)
			continue
		}
		for _, tc := range g.Tests {
			forms, err := serializations(tc.Data)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			hit := false
			for _, f := range forms {
				if match(f) {
					hit = true
					break
				}
			}
			if tc.Valid {
				tally.valid++
				if hit {
					tally.accepted++
				} else {
					t.Logf("%s %q / %q: valid instance %s not accepted", filepath.Base(file), g.Description, tc.Description, truncate(string(tc.Data), 120))
				}
			} else {
				tally.invalid++
				if !hit {
					tally.rejected++
				} else {
					t.Errorf("%s %q / %q: invalid instance %s accepted by\n%s", filepath.Base(file), g.Description, tc.Description, truncate(string(tc.Data), 200), truncate(gr.writeGBNF(), 1500))
				}
			}
		}
	}
	return tally
}

// withDraft7 marks a suite schema as draft 7 (the suite's draft7 schemas do not say so),
// so that $ref overrides its siblings as that draft says.
func withDraft7(schema []byte) []byte {
	s := strings.TrimSpace(string(schema))
	if !strings.HasPrefix(s, "{") || strings.Contains(s, `"$schema"`) {
		return schema
	}
	rest := strings.TrimSpace(s[1:])
	if rest == "}" {
		return []byte(`{"$schema":"http://json-schema.org/draft-07/schema#"}`)
	}
	return []byte(`{"$schema":"http://json-schema.org/draft-07/schema#",` + rest)
}

// maxForms caps the serializations tried for one instance.
const maxForms = 720

// serializations writes a JSON value compactly in every order of its object keys (up to
// maxForms forms): the grammar fixes the order of properties, so an instance belongs to its
// language when any order matches.
func serializations(data []byte) ([]string, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	return forms(v), nil
}

func forms(v any) []string {
	switch v := v.(type) {
	case []any:
		out := []string{""}
		for i, e := range v {
			sub := forms(e)
			var next []string
			for _, a := range out {
				for _, b := range sub {
					if len(next) < maxForms {
						sep := ","
						if i == 0 {
							sep = ""
						}
						next = append(next, a+sep+b)
					}
				}
			}
			out = next
		}
		for i := range out {
			out[i] = "[" + out[i] + "]"
		}
		return out
	case *object:
		var out []string
		for _, perm := range permutations(v.keys) {
			parts := []string{""}
			for i, k := range perm {
				sub := forms(v.vals[k])
				var next []string
				for _, a := range parts {
					for _, b := range sub {
						if len(next) < maxForms {
							sep := ","
							if i == 0 {
								sep = ""
							}
							next = append(next, a+sep+quoteJSON(k)+":"+b)
						}
					}
				}
				parts = next
			}
			for _, p := range parts {
				if len(out) < maxForms {
					out = append(out, "{"+p+"}")
				}
			}
		}
		return out
	}
	var b strings.Builder
	encodeCompact(&b, v)
	return []string{b.String()}
}

// permutations lists the orders of keys (all of them up to 6 keys, else the given order).
func permutations(keys []string) [][]string {
	if len(keys) > 6 {
		return [][]string{keys}
	}
	if len(keys) <= 1 {
		return [][]string{keys}
	}
	var out [][]string
	for i, k := range keys {
		rest := append(append([]string{}, keys[:i]...), keys[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{k}, p...))
		}
	}
	return out
}
