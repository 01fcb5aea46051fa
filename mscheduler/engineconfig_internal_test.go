package mscheduler

import (
	"context"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mscheduler/mscheduler/mscheduler/internal/engine"
	"github.com/mscheduler/mscheduler/mscheduler/internal/stored"
)

// TestEngineConfigCarriesEveryField: every field of ConsumerConfig that the
// engine's Config also has reaches the engine as set, and the engine's
// Config has no field the conversion leaves out but the two it gets from
// elsewhere (the typed layer's Prepare, the package's Documents). A field
// added to both and forgotten in engineConfig fails it.
func TestEngineConfigCarriesEveryField(t *testing.T) {
	var in ConsumerConfig
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		setNonZero(t, v.Type().Field(i).Name, f, i+1)
	}
	prepare := engine.PrepareFunc(func(*stored.Task, *engine.Run) (engine.CallFunc, error) {
		return func(context.Context) (bson.RawValue, error) { return bson.RawValue{}, nil }, nil
	})
	out := reflect.ValueOf(in.engineConfig(prepare)).Elem()
	for i := range out.NumField() {
		name := out.Type().Field(i).Name
		got := out.Field(i)
		want := v.FieldByName(name)
		switch {
		case name == "Prepare" || name == "Documents":
			if got.IsZero() {
				t.Errorf("engine Config.%s is not set", name)
			}
		case !want.IsValid():
			t.Errorf("engine Config.%s has no ConsumerConfig field to come from", name)
		case name == "Retention":
			if got.Interface() != in.Retention.policy() {
				t.Errorf("Retention: %v, want %v", got.Interface(), in.Retention.policy())
			}
		case got.Kind() == reflect.Func:
			if got.IsNil() {
				t.Errorf("%s: not carried over", name)
			}
		case got.Kind() == reflect.String:
			if got.String() != want.String() {
				t.Errorf("%s: %q, want %q", name, got.String(), want.String())
			}
		case !reflect.DeepEqual(got.Interface(), want.Interface()):
			t.Errorf("%s: %v, want %v", name, got.Interface(), want.Interface())
		}
	}
}

// setNonZero sets f to a value that is not its zero, distinct by n.
func setNonZero(t *testing.T, name string, f reflect.Value, n int) {
	t.Helper()
	switch f.Kind() {
	case reflect.String:
		f.SetString(name)
	case reflect.Int, reflect.Int64:
		f.SetInt(int64(n))
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Slice:
		f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		if e := f.Index(0); e.Kind() == reflect.String {
			e.SetString(name)
		}
	case reflect.Pointer:
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Func:
		f.Set(reflect.MakeFunc(f.Type(), func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, f.Type().NumOut())
			for i := range out {
				out[i] = reflect.Zero(f.Type().Out(i))
			}
			return out
		}))
	case reflect.Struct:
		for i := range f.NumField() {
			if f.Field(i).CanSet() {
				setNonZero(t, name, f.Field(i), n+i)
			}
		}
	default:
		t.Fatalf("%s: set a value of kind %s", name, f.Kind())
	}
}
