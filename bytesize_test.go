package kvasir

import (
	"strconv"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"1024", 1024, true}, {"512MiB", 512 << 20, true}, {"2GiB", 2 << 30, true},
		{"1GB", 1e9, true}, {"1.5g", 3 << 29, true}, {"64k", 64 << 10, true}, {" 8 MiB ", 8 << 20, true},
		{"lots", 0, false}, {"-1GiB", 0, false}, {"GiB", 0, false},
		{"0", 0, true}, {"1e3", 1000, true}, {"inf", 0, false}, {"NaN", 0, false}, {"9e18", 9e18, true}, {"8EiB", 0, false}, {"16777216t", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParseBytes: any input gives a size of at least 0 or an error, never a panic, and a
// plain decimal count of bytes reads back as itself.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"", "1024", "512MiB", "1.5g", " 8 MiB ", "-1", "1e400", "0x10k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("ParseBytes(%q) = %d with error %v", s, n, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		if want, err := strconv.ParseInt(s, 10, 64); err == nil && want < 1<<53 && n != want {
			t.Fatalf("ParseBytes(%q) = %d, want %d", s, n, want)
		}
	})
}
