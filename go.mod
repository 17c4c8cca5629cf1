module github.com/shardcache/shardcache

go 1.26.8

require github.com/twmb/murmur3 v1.2.2
