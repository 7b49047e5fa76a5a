package main

import "testing"

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"1024", 1024, true}, {"512MiB", 512 << 20, true}, {"2GiB", 2 << 30, true},
		{"1GB", 1e9, true}, {"1.5g", 3 << 29, true}, {"64k", 64 << 10, true}, {" 8 MiB ", 8 << 20, true},
		{"lots", 0, false}, {"-1GiB", 0, false}, {"GiB", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
