# The elastix settings the Kortex peers share (sourced by elastix_ixi.sh and elastix_multimodal.sh):
# elastix_params prints every setting but the transform; elastix_affine_params adds the affine transform
# with a centre-of-gravity start.
elastix_params() {
  cat <<'EOF'
(FixedInternalImagePixelType "float")
(MovingInternalImagePixelType "float")
(FixedImageDimension 3)
(MovingImageDimension 3)
(Registration "MultiResolutionRegistration")
(Interpolator "BSplineInterpolator")
(ResampleInterpolator "FinalBSplineInterpolator")
(Resampler "DefaultResampler")
(FixedImagePyramid "FixedSmoothingImagePyramid")
(MovingImagePyramid "MovingSmoothingImagePyramid")
(Optimizer "AdaptiveStochasticGradientDescent")
(Metric "AdvancedMattesMutualInformation")
(HowToCombineTransforms "Compose")
(NumberOfHistogramBins 32)
(NumberOfResolutions 4)
(MaximumNumberOfIterations 500)
(NumberOfSpatialSamples 2048)
(NewSamplesEveryIteration "true")
(ImageSampler "RandomCoordinate")
(BSplineInterpolationOrder 1)
(FinalBSplineInterpolationOrder 3)
(DefaultPixelValue 0)
(WriteResultImage "false")
(ResultImageFormat "nii.gz")
EOF
}
elastix_affine_params() {
  elastix_params
  printf '(Transform "AffineTransform")\n(AutomaticScalesEstimation "true")\n(AutomaticTransformInitialization "true")\n(AutomaticTransformInitializationMethod "CenterOfGravity")\n'
}
