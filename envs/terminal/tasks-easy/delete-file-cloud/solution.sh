rm cloud.txt
