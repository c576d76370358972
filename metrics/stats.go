package metrics

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/udpgate/udpgate/conn"
	"github.com/udpgate/udpgate/internal/protocol"
	"github.com/udpgate/udpgate/message"
)

// labelValues name the series of an array field of conn.Stats by index
// (its tag values:), from the one table of each index type; "" leaves the
// index out (a reason's 0 is none).
var labelValues = map[string]func(i int) string{
	"drop":         func(i int) string { return skipNone(i, protocol.DropReason(i).String()) },
	"packet":       func(i int) string { return protocol.PacketType(i).String() },
	"disconnect":   func(i int) string { return skipNone(i, protocol.DisconnectReason(i).Label()) },
	"message_drop": func(i int) string { return skipNone(i, message.DropReason(i).Label()) },
}

func skipNone(i int, label string) string {
	if i == 0 {
		return ""
	}
	return label
}

// statsField is one tagged field of conn.Stats: where it is, its metric,
// and the label values of its series (one, or one per array index).
type statsField struct {
	index  int
	desc   *prometheus.Desc
	vtype  prometheus.ValueType
	labels []string // per array index ("" to skip); nil for a field without a label
	fixed  string   // a scalar's fixed label value
}

// statsFields reads conn.Stats's tags (see its doc) into the fields to emit
// and the descriptions, each metric once. A malformed tag panics: it is a
// programming error caught by any test that makes a Collector.
func statsFields(d func(name, help string, labels ...string) *prometheus.Desc) ([]statsField, []*prometheus.Desc) {
	t := reflect.TypeFor[conn.Stats]()
	byName := map[string]*prometheus.Desc{}
	var fields []statsField
	var descs []*prometheus.Desc
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := f.Tag.Lookup("metric")
		if !ok {
			continue
		}
		sf := statsField{index: i, vtype: prometheus.GaugeValue}
		if strings.HasSuffix(name, "_total") {
			sf.vtype = prometheus.CounterValue
		}
		label, fixed, _ := strings.Cut(f.Tag.Get("label"), "=")
		sf.fixed = fixed
		if f.Type.Kind() == reflect.Array {
			values, ok := labelValues[f.Tag.Get("values")]
			if !ok || label == "" {
				panic(fmt.Sprintf("metrics: conn.Stats.%s: an array needs a label and known values, not %q", f.Name, f.Tag))
			}
			sf.labels = make([]string, f.Type.Len())
			for j := range sf.labels {
				sf.labels[j] = values(j)
			}
		}
		desc, ok := byName[name]
		if !ok {
			var labels []string
			if label != "" {
				labels = []string{label}
			}
			desc = d(name, f.Tag.Get("help"), labels...)
			byName[name] = desc
			descs = append(descs, desc)
		}
		sf.desc = desc
		fields = append(fields, sf)
	}
	return fields, descs
}

// collectStats sends the fields of st as constant metrics.
func collectStats(ch chan<- prometheus.Metric, fields []statsField, st *conn.Stats) {
	v := reflect.ValueOf(st).Elem()
	for _, f := range fields {
		fv := v.Field(f.index)
		if f.labels != nil {
			for j, l := range f.labels {
				if l != "" {
					ch <- prometheus.MustNewConstMetric(f.desc, f.vtype, number(fv.Index(j)), l)
				}
			}
			continue
		}
		if f.fixed != "" {
			ch <- prometheus.MustNewConstMetric(f.desc, f.vtype, number(fv), f.fixed)
		} else {
			ch <- prometheus.MustNewConstMetric(f.desc, f.vtype, number(fv))
		}
	}
}

func number(v reflect.Value) float64 {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return time.Duration(v.Int()).Seconds() // a _seconds metric
	}
	if v.CanUint() {
		return float64(v.Uint())
	}
	return float64(v.Int())
}
