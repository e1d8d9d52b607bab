"""ROS 2 nodes: thin shells that convert messages and call the algorithm modules."""
