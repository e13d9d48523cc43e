echo cloud
