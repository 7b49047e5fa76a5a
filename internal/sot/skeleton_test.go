package sot

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestParseSkeleton(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string // nil: an error
	}{
		{"1. Warm up\n2. Run fast\n3. Cool down", []string{"Warm up", "Run fast", "Cool down"}},
		{"1) a\n\n 2)  b \n", []string{"a", "b"}},
		{"1. pi is\n3.14 or so\n2. e", []string{"pi is 3.14 or so", "e"}},
		{"1. only one", nil},
		{"Sure! 1. a\n2. b", nil},
		{"1. a\n3. c", []string{"a", "c"}},
		{"1. a\n2.", nil},
		{"", nil},
		{"1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j\n11. k", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}},
	} {
		got, err := ParseSkeleton(tc.text)
		if tc.want == nil {
			if !errors.Is(err, ErrSkeleton) {
				t.Errorf("ParseSkeleton(%q) = %q, %v: want an ErrSkeleton", tc.text, got, err)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("ParseSkeleton(%q) = %q, %v: want %q", tc.text, got, err, tc.want)
		}
	}
}

// FuzzParseSkeleton: no panic; a parsed skeleton has MinPoints..MaxPoints points of text,
// and written back it parses to the same points.
func FuzzParseSkeleton(f *testing.F) {
	for _, s := range []string{"1. a\n2. b", "1) x\n2) y\n3) z", "1. \n2. b", "12. x", "1.5 a\n2. b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		points, err := ParseSkeleton(text)
		if err != nil {
			return
		}
		if len(points) < MinPoints || len(points) > MaxPoints {
			t.Fatalf("%q: %d points", text, len(points))
		}
		again, err := ParseSkeleton(FormatSkeleton(points))
		if err != nil || strings.Join(again, "\x00") != strings.Join(points, "\x00") {
			t.Fatalf("%q: points %q written back parse to %q, %v", text, points, again, err)
		}
	})
}

// TestSkeletonRegex: the skeleton's language (after the prefill) is numbered lists of at
// least MinPoints points of 1 to 40 characters, checked with Go's regexp; every such list
// parses.
func TestSkeletonRegex(t *testing.T) {
	re := regexp.MustCompile(`^(?:` + SkeletonRegex() + `)$`)
	list := func(n int) string {
		var pts []string
		for i := range n {
			pts = append(pts, "point "+string(rune('a'+i)))
		}
		return strings.TrimPrefix(FormatSkeleton(pts), SkeletonPrefill)
	}
	for n := 1; n <= MaxPoints+2; n++ {
		if got, want := re.MatchString(list(n)), n >= MinPoints; got != want {
			t.Errorf("%d points: match %v, want %v", n, got, want)
		}
		if n >= MinPoints {
			if pts, err := ParseSkeleton(SkeletonPrefill + list(n) + "\n"); err != nil || len(pts) != min(n, MaxPoints) {
				t.Errorf("%d points: the regex's language parses to %q, %v", n, pts, err)
			}
		}
	}
	for _, bad := range []string{" a\n2. ", " a\n\n2. b", " a\n2. " + strings.Repeat("x", 41), "a\n2. b"} {
		if re.MatchString(bad) {
			t.Errorf("%q matches", bad)
		}
	}
}
