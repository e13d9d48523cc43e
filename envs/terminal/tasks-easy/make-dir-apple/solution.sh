mkdir apple
