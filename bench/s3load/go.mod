module cairn/bench/s3load

go 1.22
