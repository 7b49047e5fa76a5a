package kvasir

import "testing"

// TestParseQuantization: the names round-trip through String, "" is none, others are
// errors.
func TestParseQuantization(t *testing.T) {
	for _, q := range []Quantization{QuantizationNone, QuantizationFP8} {
		got, err := ParseQuantization(q.String())
		if err != nil || got != q {
			t.Errorf("%s: parsed as %v, %v", q, got, err)
		}
	}
	if q, err := ParseQuantization(""); err != nil || q != QuantizationNone {
		t.Errorf(`"": %v, %v`, q, err)
	}
	for _, s := range []string{"FP8", "int8", "fp8_e5m2"} {
		if _, err := ParseQuantization(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
