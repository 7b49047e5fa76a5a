package chat

import (
	"testing"
	"time"
)

// TestStrftime checks Python strftime directives (values as Python's datetime gives them).
func TestStrftime(t *testing.T) {
	at := time.Date(2025, 3, 7, 9, 5, 3, 42000, time.UTC)
	pm := time.Date(2024, 12, 29, 0, 30, 0, 0, time.UTC)
	tests := []struct {
		t      time.Time
		format string
		want   string
	}{
		{at, "%d %b %Y", "07 Mar 2025"},
		{at, "%Y-%m-%d", "2025-03-07"},
		{at, "%A, %B %-d, %Y", "Friday, March 7, 2025"},
		{at, "%a %e %H:%M:%S %p %I", "Fri  7 09:05:03 AM 09"},
		{at, "%j %y %w %u %f %%", "066 25 5 5 000042 %"},
		{at, "%x %X", "03/07/25 09:05:03"},
		{pm, "%I %p %w %u %-m", "12 AM 0 7 12"},
		{at, "%Q and trailing %", "%Q and trailing %"},
	}
	for _, tc := range tests {
		if got := strftime(tc.format, tc.t); got != tc.want {
			t.Errorf("strftime(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}
