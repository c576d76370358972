package metrics

import (
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/udpgate/udpgate/conn"
)

// unexported are the conn.Stats fields that are no metric of their own:
// PromotionAcks is in handshake_sent_total{type="ack"}, Sockets has its own
// table (socketCounters).
var unexported = []string{"PromotionAcks", "Sockets"}

// TestStatsTable checks conn.Stats is the whole table: every field is a
// metric (or listed above), and every metric has help.
func TestStatsTable(t *testing.T) {
	st := reflect.TypeFor[conn.Stats]()
	for i := range st.NumField() {
		f := st.Field(i)
		if _, ok := f.Tag.Lookup("metric"); !ok && !slices.Contains(unexported, f.Name) {
			t.Errorf("conn.Stats.%s has no metric tag: give it its metric (see conn.Stats's doc)", f.Name)
		}
	}
	fields, descs := statsFields(func(name, help string, labels ...string) *prometheus.Desc {
		if help == "" {
			t.Errorf("metric %s has no help tag", name)
		}
		return prometheus.NewDesc(Namespace+"_"+name, help, labels, nil)
	})
	if len(fields) != st.NumField()-len(unexported) || len(descs) == 0 {
		t.Errorf("%d fields and %d metrics read from %d fields of conn.Stats", len(fields), len(descs), st.NumField())
	}
}
