package certs

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// expiryDesc is the one series of ExpiryCollector.
var expiryDesc = prometheus.NewDesc("fencedlease_certificate_expiry_timestamp_seconds",
	"Unix time at which the webhook server's serving certificate (the one in its certificate directory) expires. Absent while there is no readable certificate.",
	[]string{"certificate"}, nil)

// ExpiryCollector reports the expiry of a certificate file, read when
// Prometheus scrapes, so that it follows every rotation, whoever wrote the
// file: the operator's own rotation, cert-manager, or a mounted Secret.
type ExpiryCollector struct {
	// Name is the certificate label ("webhook").
	Name string
	// File is the PEM file; its first certificate counts.
	File string
}

// Describe implements prometheus.Collector.
func (c ExpiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

// Collect implements prometheus.Collector.
func (c ExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	notAfter, err := NotAfter(c.File)
	if err != nil {
		return // no series: an alert on absent() or on the webhook's readiness covers it
	}
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(notAfter.Unix()), c.Name)
}

// NotAfter reads the expiry of the first certificate of a PEM file.
func NotAfter(file string) (time.Time, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}, fmt.Errorf("read certificate %s: %w", file, err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return time.Time{}, errors.New("no PEM certificate in " + file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse certificate %s: %w", file, err)
	}
	return cert.NotAfter, nil
}
