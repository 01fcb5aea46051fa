module github.com/mscheduler/mscheduler

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/robfig/cron/v3 v3.0.1
	go.mongodb.org/mongo-driver/v2 v2.9.3
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.24.0
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/xdg-go/pbkdf2 v1.0.0 // indirect
	github.com/xdg-go/scram v1.2.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/text v0.39.0 // indirect
)
