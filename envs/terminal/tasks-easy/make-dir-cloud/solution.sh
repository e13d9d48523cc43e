mkdir cloud
