"""S3 settings of the unit tests (the ``s3env`` fixture puts them in the environment): made-up
values, and nothing listens on the endpoint, so a test that reached S3 would fail."""

ENV = {"S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE123",
       "AWS_SECRET_ACCESS_KEY": "s3cr3t/+value", "AWS_REGION": "eu-west-1"}
