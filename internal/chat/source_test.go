package chat

import "testing"

// TestPrepareSource checks the source adaptations directly.
func TestPrepareSource(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a\n", "a"},
		{"a\r\nb\r", "a\nb"},
		{"{% if x %}{{ y }}\n{% endif %}", "{% if x %}\n{{ y }}\n{% endif %}"},
		{"{%- if x -%}{{ y }}", "{%- if x -%}{{ y }}"},
		{"{# c #}{% if %}", "{# c #}\n{% if %}"},
		{"{{ y }}{%- if x %}", "{{ y }} {%- if x %}"},
		{"{{ y }}{{ z }}", "{{ y }}{{ z }}"},
		{"{{ t | tojson }}{{ t|tojson(indent=4) }}{# x|tojson #}", "{{ t | kvasir_tojson }}{{ t|kvasir_tojson(indent=4) }}{# x|tojson #}"},
		{"text |tojson {{ '%}' }}", "text |tojson {{ '%}' }}"},
		{"{% if 'a' %}{ x {{ unclosed", "{% if 'a' %}{ x {{ unclosed"},
	}
	for _, tc := range tests {
		if got := prepareSource(tc.in); got != tc.want {
			t.Errorf("prepareSource(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
